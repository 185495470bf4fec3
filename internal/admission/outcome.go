package admission

// Outcome is the result of an admission. The zero value is not an outcome
// any call returns.
type Outcome uint8

const (
	// Admitted means the caller holds a Permit and must Release it.
	Admitted Outcome = iota + 1
	// RejectedConcurrency means the account already has MaxConcurrent
	// permits in flight.
	RejectedConcurrency
	// RejectedRate means the account's rate bucket (all shards of it) could
	// not cover the cost now; retrying later can succeed.
	RejectedRate
	// RejectedQuota means the funding line and the overage allowance are
	// both exhausted; only Fund helps.
	RejectedQuota
	// RejectedCapacity means the account is not known, the engine holds
	// MaxAccounts accounts, and none could be evicted (all pinned or busy).
	RejectedCapacity

	numOutcomes = int(RejectedCapacity) + 1
)

var outcomeNames = [numOutcomes]string{
	"unknown", "admitted", "rejected_concurrency", "rejected_rate", "rejected_quota", "rejected_capacity",
}

// String returns a stable snake_case name, suitable as a bounded metric label.
func (o Outcome) String() string {
	if int(o) < numOutcomes {
		return outcomeNames[o]
	}
	return "unknown"
}

// OK reports whether o is Admitted.
func (o Outcome) OK() bool { return o == Admitted }

// Outcomes lists every outcome an admission can return, in order.
func Outcomes() []Outcome {
	return []Outcome{Admitted, RejectedConcurrency, RejectedRate, RejectedQuota, RejectedCapacity}
}
