package idempotency

// testHookAfterCommit, when not nil, becomes every Keys' afterCommit: it
// runs once an answer is committed and before it is written. Only a
// binary built with the testhooks build tag sets it (testhook_on.go), so
// the end-to-end test of a cell killed at that point can stop one there;
// a binary built without the tag has no code that sets it, whatever its
// environment.
var testHookAfterCommit func()
