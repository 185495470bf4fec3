package slotmove

import (
	"context"
	"fmt"
	"strings"
)

// Verifying a range that is being written to. The full verify runs before
// the freeze, with the stream paused, so the target stands still at an
// applied position while the source may already be ahead of it: per table
// and segment it compares row count and checksum (the sum of a 64-bit hash
// of each row's text, so order does not matter and any changed value
// shows) and, where they differ, every row, remembering the keys that
// differ. From its start on, the stream records every key it changes.
//
// Inside the freeze, once the stream has delivered everything up to the
// fence, only those keys are compared again, row by row: a row whose key
// the stream never touched after the full verify is the same on both sides
// as it was then, since the source did not change it and only the stream
// writes the target's range. A mismatch there that the stream explains
// (the source was ahead) is thus compared after catching up, and a real
// one (a lost or damaged row) stays a mismatch and stops the move.

// fullVerify compares the whole range (see above), with the streams
// paused, and turns tracking on.
func (mv *mover) fullVerify(ctx context.Context, rep *Report) error {
	mv.tracking = true
	mv.dirty = map[string]map[string]rowKey{}
	mv.mismatched = map[string]map[string]rowKey{}
	for ti := range mv.tables {
		t := &mv.tables[ti]
		q := fmt.Sprintf(`SELECT count(*), coalesce(sum(hashtextextended(ROW(%s)::text, 0)), 0)::text FROM %s WHERE slot BETWEEN $1 AND $2`,
			t.list, t.ident)
		var total int64
		for _, seg := range mv.segs {
			if err := mv.keepStreamsAlive(ctx); err != nil {
				return err
			}
			var sn, tn int64
			var ssum, tsum string
			if err := mv.source[seg.src].conn.QueryRow(ctx, q, seg.rg.Lo, seg.rg.Hi).Scan(&sn, &ssum); err != nil {
				return fmt.Errorf("slotmove: verify %s on source %s: %w", t.name, mv.source[seg.src].name, err)
			}
			if err := mv.target[seg.dst].conn.QueryRow(ctx, q, seg.rg.Lo, seg.rg.Hi).Scan(&tn, &tsum); err != nil {
				return fmt.Errorf("slotmove: verify %s on target %s: %w", t.name, mv.target[seg.dst].name, err)
			}
			total += sn
			if sn != tn || ssum != tsum {
				if err := mv.rowDiff(ctx, t, seg); err != nil {
					return err
				}
			}
		}
		rep.Verified[t.name] = total
		mv.log.Info("verified", "table", t.name, "rows", total, "rows_to_check_again", len(mv.mismatched[t.name]))
	}
	return nil
}

// rowDiff adds the keys of a segment's rows that differ between the sides
// to mv.mismatched. It holds the target's rows of the segment (key and
// hash) in memory; only segments whose checksums differ come here.
func (mv *mover) rowDiff(ctx context.Context, t *tableInfo, seg segment) error {
	keyCols := make([]string, len(t.pk))
	for i, c := range t.pk {
		keyCols[i] = quoteIdent(c) + "::text"
	}
	q := fmt.Sprintf(`SELECT slot, %s, hashtextextended(ROW(%s)::text, 0)::text FROM %s WHERE slot BETWEEN %d AND %d`,
		strings.Join(keyCols, ", "), t.list, t.ident, seg.rg.Lo, seg.rg.Hi)
	type entry struct {
		k    rowKey
		hash string
	}
	read := func(sc *shardConn, fn func(rowKey, string)) error {
		res := sc.conn.PgConn().ExecParams(ctx, q, nil, nil, nil, nil)
		for res.NextRow() {
			v := res.Values()
			var slot int
			if _, err := fmt.Sscan(string(v[0]), &slot); err != nil {
				return err
			}
			key := make([][]byte, len(t.pk))
			for i := range t.pk {
				key[i] = append([]byte(nil), v[1+i]...)
			}
			fn(rowKey{slot: slot, key: key}, string(v[len(v)-1]))
		}
		_, err := res.Close()
		return err
	}
	target := map[string]entry{}
	if err := read(mv.target[seg.dst], func(k rowKey, h string) { target[joinKey(k.key)] = entry{k, h} }); err != nil {
		return fmt.Errorf("slotmove: compare %s rows on target %s: %w", t.name, mv.target[seg.dst].name, err)
	}
	err := read(mv.source[seg.src], func(k rowKey, h string) {
		j := joinKey(k.key)
		if e, ok := target[j]; ok && e.hash == h {
			delete(target, j)
			return
		}
		delete(target, j)
		addKey(mv.mismatched, t.name, k)
	})
	if err != nil {
		return fmt.Errorf("slotmove: compare %s rows on source %s: %w", t.name, mv.source[seg.src].name, err)
	}
	for _, e := range target {
		addKey(mv.mismatched, t.name, e.k)
	}
	return nil
}

// keyVerify compares, row by row, the keys the last verify found
// different and those the stream changed since. With final unset (before
// the freeze, the streams paused) it starts tracking afresh and keeps the
// keys that still differ for the next round, so the final round inside
// the freeze only looks at what changed in the last moments; with final
// set, any difference is a VerifyError. It returns how many keys it
// compared.
func (mv *mover) keyVerify(ctx context.Context, final bool) (int, error) {
	checked := 0
	next := map[string]map[string]rowKey{}
	for ti := range mv.tables {
		t := &mv.tables[ti]
		keys := map[string]rowKey{}
		for j, k := range mv.mismatched[t.name] {
			keys[j] = k
		}
		for j, k := range mv.dirty[t.name] {
			keys[j] = k
		}
		if !final {
			delete(mv.dirty, t.name)
		}
		// Group by (source shard, target shard).
		groups := map[[2]int][]rowKey{}
		for _, k := range keys {
			g := [2]int{mv.srcMap.Owner(k.slot), mv.dstMap.Owner(k.slot)}
			groups[g] = append(groups[g], k)
		}
		for g, ks := range groups {
			for len(ks) > 0 {
				// The streams wait meanwhile; answering their servers
				// keeps wal_sender_timeout from ending them.
				if err := mv.keepStreamsAlive(ctx); err != nil {
					return checked, err
				}
				n := min(len(ks), 2000)
				diff, err := mv.compareKeys(ctx, t, mv.source[g[0]], mv.target[g[1]], ks[:n])
				if err != nil {
					return checked, err
				}
				if len(diff) > 0 && final {
					return checked, diff[0].VerifyError
				}
				for _, d := range diff {
					addKey(next, t.name, d.k)
				}
				checked += n
				ks = ks[n:]
			}
		}
	}
	mv.mismatched = next
	return checked, nil
}

// keyDiff is a row that differs between the sides.
type keyDiff struct {
	k rowKey
	*VerifyError
}

// compareKeys reads the rows of keys on both sides (an index join on the
// primary key) and returns those missing on one side or different.
func (mv *mover) compareKeys(ctx context.Context, t *tableInfo, src, dst *shardConn, keys []rowKey) ([]keyDiff, error) {
	keyCols := make([]string, len(t.pk))
	arrays := make([]string, len(t.pk))
	aliases := make([]string, len(t.pk))
	on := make([]string, len(t.pk))
	args := make([]any, len(t.pk))
	for i, c := range t.pk {
		keyCols[i] = "t." + quoteIdent(c) + "::text"
		arrays[i] = fmt.Sprintf("$%d::text[]", i+1)
		aliases[i] = fmt.Sprintf("k%d", i)
		on[i] = fmt.Sprintf("t.%s = k.k%d::%s", quoteIdent(c), i, t.pkTypes[i])
		vals := make([]string, len(keys))
		for j, k := range keys {
			vals[j] = string(k.key[i])
		}
		args[i] = vals
	}
	cols := make([]string, len(t.cols))
	for i, c := range t.cols {
		cols[i] = "t." + c
	}
	q := fmt.Sprintf(`SELECT %s, hashtextextended(ROW(%s)::text, 0)::text FROM unnest(%s) AS k(%s) JOIN %s t ON %s`,
		strings.Join(keyCols, ", "), strings.Join(cols, ", "), strings.Join(arrays, ", "), strings.Join(aliases, ", "), t.ident, strings.Join(on, " AND "))
	read := func(sc *shardConn) (map[string]string, error) {
		out := map[string]string{}
		rows, err := sc.conn.Query(ctx, q, args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			vals := make([]string, len(t.pk)+1)
			ptrs := make([]any, len(vals))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				return nil, err
			}
			key := make([][]byte, len(t.pk))
			for i := range t.pk {
				key[i] = []byte(vals[i])
			}
			out[joinKey(key)] = vals[len(vals)-1]
		}
		return out, rows.Err()
	}
	// Both sides at once: inside the freeze this is frozen time.
	var sh map[string]string
	srcErr := make(chan error, 1)
	go func() {
		var err error
		sh, err = read(src)
		srcErr <- err
	}()
	th, err := read(dst)
	if serr := <-srcErr; serr != nil {
		return nil, fmt.Errorf("slotmove: verify %s rows on source %s: %w", t.name, src.name, serr)
	}
	if err != nil {
		return nil, fmt.Errorf("slotmove: verify %s rows on target %s: %w", t.name, dst.name, err)
	}
	var diff []keyDiff
	for _, k := range keys {
		j := joinKey(k.key)
		s, sok := sh[j]
		d, dok := th[j]
		if sok != dok || s != d {
			ve := &VerifyError{Table: t.name, SourceSum: s, TargetSum: d}
			ve.Range.Lo, ve.Range.Hi = k.slot, k.slot
			if sok {
				ve.SourceRows = 1
			}
			if dok {
				ve.TargetRows = 1
			}
			diff = append(diff, keyDiff{k, ve})
		}
	}
	return diff, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
