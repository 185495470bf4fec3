package tenant

import "context"

// Scope is one request's context, made once by the server's outermost
// middleware so that the layers inside it (tenancy, the database bulkhead)
// attach their values to it instead of each wrapping the context and
// copying the *http.Request again: a request copy is the largest allocation
// a middleware makes, and the chain would make one per layer.
//
// A Scope is written only before the handler runs, by the goroutine serving
// the request (SetTenant, Attach); from then on it is read-only, and
// goroutines the handler starts see its values like any context's. Code
// that is not request middleware should use With and context.WithValue.
type Scope struct {
	context.Context
	id    string
	key   any
	value any
}

// NewScope returns an empty scope over parent (which carries the request's
// deadline and cancellation).
func NewScope(parent context.Context) *Scope { return &Scope{Context: parent} }

// ScopeOf returns ctx as a Scope when ctx is one itself (not a context
// derived from one: a layer above the scope could shadow what it holds).
func ScopeOf(ctx context.Context) (*Scope, bool) {
	s, ok := ctx.(*Scope)
	return s, ok
}

// SetTenant records the request's tenant id, which From then returns. An
// empty id records nothing.
func (s *Scope) SetTenant(id string) {
	if id != "" {
		s.id = id
	}
}

// Attach stores one more value under key, which Value then returns. A scope
// holds one such value; Attach reports false, storing nothing, when the
// slot already holds another key's value (the caller falls back to
// context.WithValue).
func (s *Scope) Attach(key, value any) bool {
	if s.key != nil && s.key != key {
		return false
	}
	s.key, s.value = key, value
	return true
}

// Value returns the scope's tenant for the tenant key, its attached value
// for that value's key, and otherwise asks the parent.
func (s *Scope) Value(key any) any {
	if _, ok := key.(ctxKey); ok && s.id != "" {
		return s.id
	}
	if s.key != nil && key == s.key {
		return s.value
	}
	return s.Context.Value(key)
}
