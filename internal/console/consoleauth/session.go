package consoleauth

import (
	"context"
	"sync"
	"time"
)

// Session is what a Store keeps of one login.
type Session struct {
	// Role is what the login's token may do.
	Role Role
	// CSRF is the session's own CSRF secret, drawn at login.
	CSRF string
	// Token is a fingerprint of the role's token at login (of the OpenID
	// settings for a person's login): a session whose token or settings
	// have changed since ends.
	Token string
	// Subject and Email name the person of an OpenID Connect login; ""
	// for a token login.
	Subject, Email string
	// Created, Seen (last use, written at most every Idle/16) and Expires
	// time it.
	Created, Seen, Expires time.Time
}

// Store keeps sessions by id (the SHA-256 of the cookie, hex). Its methods
// must be safe for concurrent use.
type Store interface {
	// Put stores a new session.
	Put(ctx context.Context, id string, s Session) error
	// Get returns a session and whether there is one.
	Get(ctx context.Context, id string) (Session, bool, error)
	// Touch records a use at t.
	Touch(ctx context.Context, id string, t time.Time) error
	// Delete forgets a session (no error when there is none).
	Delete(ctx context.Context, id string) error
}

// MemoryStore keeps sessions in this process's memory, at most Max of them
// (the router, which has no database). A session is known only to the
// process that created it: a logout ends it at once there, and a restart
// ends them all.
type MemoryStore struct {
	// Now is the clock that decides, when the store is full, which
	// sessions have ended; nil means time.Now.
	Now func() time.Time
	// Idle is the idle timeout sessions end at (for sweeping).
	Idle time.Duration
	// Max bounds the sessions kept; 0 means DefaultMaxSessions.
	Max int

	mu       sync.Mutex
	sessions map[string]Session
}

// DefaultMaxSessions bounds a MemoryStore: when full, sessions that ended
// are swept, then the least recently used one makes room.
const DefaultMaxSessions = 1024

// Put implements Store.
func (m *MemoryStore) Put(_ context.Context, id string, s Session) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sessions == nil {
		m.sessions = map[string]Session{}
	}
	limit := m.Max
	if limit <= 0 {
		limit = DefaultMaxSessions
	}
	if len(m.sessions) >= limit {
		now := time.Now()
		if m.Now != nil {
			now = m.Now()
		}
		oldest, oldestSeen := "", time.Time{}
		for k, v := range m.sessions {
			if !now.Before(v.Expires) || (m.Idle > 0 && now.Sub(v.Seen) >= m.Idle) {
				delete(m.sessions, k)
				continue
			}
			if oldest == "" || v.Seen.Before(oldestSeen) {
				oldest, oldestSeen = k, v.Seen
			}
		}
		if len(m.sessions) >= limit {
			delete(m.sessions, oldest)
		}
	}
	m.sessions[id] = s
	return nil
}

// Get implements Store.
func (m *MemoryStore) Get(_ context.Context, id string) (Session, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	return s, ok, nil
}

// Touch implements Store.
func (m *MemoryStore) Touch(_ context.Context, id string, t time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		s.Seen = t
		m.sessions[id] = s
	}
	return nil
}

// Delete implements Store.
func (m *MemoryStore) Delete(_ context.Context, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, id)
	return nil
}

// Len returns how many sessions the store holds.
func (m *MemoryStore) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.sessions)
}
