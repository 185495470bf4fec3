package local

type cappedKind struct {
	limit      int
	running    int
	reserved   int
	parkedHead *job
	parkedTail *job
}

// park holds j until the kind has capacity.
func (k *cappedKind) park(j *job) {
	j.next = nil
	if k.parkedTail == nil {
		k.parkedHead = j
	} else {
		k.parkedTail.next = j
	}
	k.parkedTail = j
}

// unpark hands free capacity of k to its oldest parked jobs.
func (b *Backend) unpark(k *cappedKind) {
	for k.parkedHead != nil && k.running+k.reserved < k.limit {
		j := k.parkedHead
		k.parkedHead = j.next
		if k.parkedHead == nil {
			k.parkedTail = nil
		}
		j.reserved = true
		k.reserved++
		b.makeReadyFirst(j)
	}
}
