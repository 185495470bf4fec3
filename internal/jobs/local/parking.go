package local

// cappedKind is a job kind with a Concurrency cap (jobs.KindSpec). The cap is
// enforced at claim: nextJob parks a job of the kind that finds it at its
// cap, and a finishing job's capacity is handed to the oldest parked job,
// reserved for it, while it goes back to the front of its tenant's line
// (see the package doc). A job is thus parked at most once.
type cappedKind struct {
	limit      int  // the cap
	running    int  // jobs of the kind running
	reserved   int  // capacity handed to parked jobs not yet claimed again
	parkedHead *job // parked jobs, oldest first, linked through job.next
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

// unpark hands free capacity of k to its oldest parked jobs, reserving it for
// them so that a fresh job of the kind cannot take it first.
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
