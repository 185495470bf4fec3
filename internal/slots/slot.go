// Package slots is the one key-to-slot hash shared by database shards and
// cells, plus the slot-spec parser and the slot map that assigns each of the
// 16,384 slots to exactly one owner.
//
// The hash is Redis Cluster's key-slot function: CRC-16/XMODEM of the key (or
// of its non-empty {hash tag}) masked to 14 bits, so `CLUSTER KEYSLOT` on any
// Redis node is a reference oracle. Shards and cells must both route through
// [Slot]; a second implementation elsewhere would let the two disagree about
// where a tenant lives.
//
// Concurrency contract: every function in this package is safe for concurrent
// use and keeps no mutable state. A [Map] is immutable once [Build] returns
// it, so any number of goroutines may call its methods concurrently without
// locking; to change the assignment, build a new Map and swap the pointer
// (for example with atomic.Pointer). Slices returned by Map methods are
// copies the caller owns.
package slots

import "errors"

// Count is the number of slots. It is fixed: changing it would move every key.
const Count = 16384

// MaxSlot is the highest slot number.
const MaxSlot = Count - 1

// ErrEmptyKey is returned for an empty key. An empty tenant id is a bug in the
// caller, and hashing it to slot 0 would silently pile such tenants onto one
// owner.
var ErrEmptyKey = errors.New("slots: empty key")

// crcTables holds CRC-16/XMODEM (poly 0x1021, init 0, not reflected, no final
// xor) lookup tables for "slicing by 8". crcTables[0] is the classic 256-entry
// byte-at-a-time table; crcTables[j][b] is the CRC contribution of byte b
// followed by j zero bytes. With one table the loop is a chain of dependent
// loads, about 2 ns a byte; eight tables let eight independent loads run at
// once, which is what keeps a typical tenant id near 10 ns. 4 KiB, fits L1.
var crcTables = makeCRCTables()

func makeCRCTables() (t [8][256]uint16) {
	for i := range t[0] {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[0][i] = c
	}
	for j := 1; j < len(t); j++ {
		for i := range t[j] {
			v := t[j-1][i]
			t[j][i] = v<<8 ^ t[0][v>>8]
		}
	}
	return t
}

// Slot returns the slot (0..MaxSlot) of key, or -1 and ErrEmptyKey (-1, not
// 0, so an ignored error cannot pass for a real slot). If key contains
// "{" and, after the first "{", a "}" with at least one byte between them,
// only those bytes are hashed, so "user1", "{user1}" and "{user1}.following"
// share a slot. "{}x" and "x{}" have an empty tag and hash whole. This is
// exactly Redis Cluster's keyHashSlot. It does not allocate.
func Slot(key string) (int, error) {
	if len(key) == 0 {
		return -1, ErrEmptyKey
	}
	return slot(key), nil
}

// slot hashes a non-empty key. Most keys have no "{", so the key is hashed
// while checking each block for one (predictable branches that stay off the
// CRC's dependency chain). A key with a "{" stops there: a non-empty tag is then
// all that is hashed, and only a key whose "{" starts no tag is hashed whole
// from the start.
func slot[K string | []byte](key K) int {
	crc, open := crcUntilBrace(key)
	if open < 0 {
		return int(crc & MaxSlot)
	}
	for j := open + 1; j < len(key); j++ {
		if key[j] == '}' {
			if j > open+1 {
				return int(crc16(key[open+1:j]) & MaxSlot)
			}
			break
		}
	}
	return int(crc16(key) & MaxSlot)
}

// crcUntilBrace returns the CRC-16/XMODEM of p and -1 if p has no '{';
// otherwise the index of the first '{' (and a CRC to be discarded).
func crcUntilBrace[K string | []byte](p K) (crc uint16, open int) {
	t := &crcTables
	off := 0 // bytes of the original p already hashed
	for len(p) >= 8 {
		_ = p[7]
		if p[0] == '{' || p[1] == '{' || p[2] == '{' || p[3] == '{' ||
			p[4] == '{' || p[5] == '{' || p[6] == '{' || p[7] == '{' {
			return 0, off + indexBrace(p)
		}
		crc = t[7][p[0]^byte(crc>>8)] ^ t[6][p[1]^byte(crc)] ^ t[5][p[2]] ^ t[4][p[3]] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
		off += 8
	}
	if len(p) >= 4 {
		_ = p[3]
		if p[0] == '{' || p[1] == '{' || p[2] == '{' || p[3] == '{' {
			return 0, off + indexBrace(p)
		}
		crc = t[3][p[0]^byte(crc>>8)] ^ t[2][p[1]^byte(crc)] ^ t[1][p[2]] ^ t[0][p[3]]
		p = p[4:]
		off += 4
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '{' {
			return 0, off + i
		}
		crc = crc<<8 ^ t[0][byte(crc>>8)^p[i]]
	}
	return crc, -1
}

func indexBrace[K string | []byte](q K) int {
	for i := 0; i < len(q); i++ {
		if q[i] == '{' {
			return i
		}
	}
	return -1
}

// crc16 returns the CRC-16/XMODEM of p.
func crc16[K string | []byte](p K) uint16 {
	t := &crcTables
	var crc uint16
	for len(p) >= 8 {
		_ = p[7]
		crc = t[7][p[0]^byte(crc>>8)] ^ t[6][p[1]^byte(crc)] ^ t[5][p[2]] ^ t[4][p[3]] ^
			t[3][p[4]] ^ t[2][p[5]] ^ t[1][p[6]] ^ t[0][p[7]]
		p = p[8:]
	}
	if len(p) >= 4 {
		_ = p[3]
		crc = t[3][p[0]^byte(crc>>8)] ^ t[2][p[1]^byte(crc)] ^ t[1][p[2]] ^ t[0][p[3]]
		p = p[4:]
	}
	for i := 0; i < len(p); i++ {
		crc = crc<<8 ^ t[0][byte(crc>>8)^p[i]]
	}
	return crc
}
