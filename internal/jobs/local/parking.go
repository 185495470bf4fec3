package local

type kind struct {
	limit    int
	running  int
	reserved int
	bhead    *job
	btail    *job
}

// park holds j until the kind has capacity.
func (k *kind) park(j *job) {
	j.next = nil
	if k.btail == nil {
		k.bhead = j
	} else {
		k.btail.next = j
	}
	k.btail = j
}

// unpark hands free capacity of k to its oldest parked jobs.
func (b *Backend) unpark(k *kind) {
	for k.bhead != nil && k.running+k.reserved < k.limit {
		j := k.bhead
		k.bhead = j.next
		if k.bhead == nil {
			k.btail = nil
		}
		j.reserved = true
		k.reserved++
		b.pushFront(j)
	}
}
