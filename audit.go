package keybrake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// ChainVersion names the way EventHash encodes an event. It is hashed with
// every event, so a later encoding can never be mistaken for this one.
const ChainVersion = "kb-audit-1"

// EventHash returns the hex SHA-256 that chains e to its predecessor: the
// hash of ChainVersion, e.PrevHash, e.Seq and every recorded field of e,
// each written as its decimal byte length, a colon, the bytes and a comma
// (a netstring), so no two different events encode alike. e.ID is not
// hashed: the database assigns it, and the chain's order is Seq. Time is
// hashed as Unix microseconds, the precision both stores keep.
func EventHash(e *Event) string {
	bp := eventHashBufs.Get().(*[]byte)
	b := (*bp)[:0]
	b = appendNetstring(b, ChainVersion)
	b = appendNetstring(b, e.PrevHash)
	b = appendNetint(b, e.Seq)
	b = appendNetstring(b, e.KeyID)
	b = appendNetint(b, e.Time.UnixMicro())
	b = appendNetstring(b, e.Operation)
	b = appendNetstring(b, e.Method)
	b = appendNetstring(b, e.Path)
	b = appendNetint(b, e.Amount)
	b = appendNetstring(b, e.Currency)
	b = appendNetint(b, int64(e.Micros))
	b = appendNetstring(b, e.Decision)
	b = appendNetstring(b, e.Reason)
	b = appendNetint(b, int64(e.UpstreamStatus))
	b = appendNetstring(b, e.ObjectID)
	b = appendNetstring(b, e.RequestID)
	b = appendNetstring(b, e.IdempotencyKey)
	b = appendNetstring(b, e.ReservationID)
	b = appendNetstring(b, e.Via)
	b = appendNetstring(b, e.MCPSession)
	b = appendNetstring(b, e.MCPClient)
	sum := sha256.Sum256(b)
	if cap(b) <= 64<<10 { // one huge event does not stay pinned in the pool
		*bp = b
		eventHashBufs.Put(bp)
	}
	return hex.EncodeToString(sum[:])
}

// eventHashBufs holds the buffers EventHash lays an event out in before
// hashing it in one call: every proxied request records an event, and one
// buffer instead of four small writes per field keeps that off the
// allocator.
var eventHashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// appendNetstring appends s as a netstring: its decimal byte length, ':',
// s, ','.
func appendNetstring(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, ':')
	b = append(b, s...)
	return append(b, ',')
}

// appendNetint appends n in decimal as a netstring.
func appendNetint(b []byte, n int64) []byte {
	var d [20]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	b = strconv.AppendInt(b, int64(len(digits)), 10)
	b = append(b, ':')
	b = append(b, digits...)
	return append(b, ',')
}

// ChainLink is one end of a key's audit chain. As a head it is the key's
// last event (Seq, and Hash its hash); as an anchor it is the first event
// kept after a prune (Seq, and Hash the hash of the pruned event before it,
// which the kept event names as its PrevHash).
type ChainLink struct {
	KeyID string    `json:"key_id"`
	Seq   int64     `json:"seq"`
	Hash  string    `json:"hash"`
	Time  time.Time `json:"time"` // when the head moved or the anchor was set
}

// Chain links the events of one key: the store hands each event the next
// Seq of its key and the previous event's Hash, and stores its EventHash,
// in the transaction that inserts it.
func (c *ChainLink) Chain(e *Event) {
	e.Seq = c.Seq + 1
	e.PrevHash = c.Hash
	e.Hash = EventHash(e)
	c.Seq, c.Hash = e.Seq, e.Hash
}

// ChainPage selects events in insertion order (ascending ID), every key's.
type ChainPage struct {
	AfterID int64 // the ID of the last event of the previous page; 0 for the first
	Limit   int   // at most this many; 0 means 1000
}

// AuditChainService reads and prunes the hash-chained audit log.
type AuditChainService interface {
	// ChainEvents returns a page of events of every key in ascending ID
	// order, the order they were inserted.
	ChainEvents(ctx context.Context, p ChainPage) ([]*Event, error)
	// ChainHeads returns every key's last link, ordered by key.
	ChainHeads(ctx context.Context) ([]ChainLink, error)
	// ChainAnchors returns the anchor of every key whose chain was pruned,
	// ordered by key.
	ChainAnchors(ctx context.Context) ([]ChainLink, error)
	// PruneEvents deletes the events older than before and, in the same
	// transaction, anchors each pruned key's chain at its first kept event
	// (or at its head, when none is kept), so the rest still verifies. It
	// returns how many events it deleted.
	PruneEvents(ctx context.Context, before time.Time, now time.Time) (int64, error)
}

// ChainBreak is the first broken link of a chain a ChainVerifier found.
type ChainBreak struct {
	KeyID   string `json:"key_id"`
	EventID int64  `json:"event_id"` // the first event that does not verify; 0 when the break is a missing tail
	Seq     int64  `json:"seq"`      // the position in the key's chain where the break is
	Reason  string `json:"reason"`
}

func (b *ChainBreak) String() string {
	return fmt.Sprintf("key %q: chain broken at seq %d (event %d): %s", b.KeyID, b.Seq, b.EventID, b.Reason)
}

// ChainVerifier checks audit chains fed to it event by event, in insertion
// order, as ChainEvents or an export returns them. Each key's chain must
// start at seq 1 with an empty PrevHash, or at its anchor; continue with
// consecutive seqs, each naming its predecessor's hash; hash to its own
// Hash; and end at the key's head. Events of a key after its first break
// are not checked further: the first break is what it reports.
//
// Editing an event breaks at that event (its hash); deleting one breaks at
// the next (a seq gap); deleting the last breaks at the head; reordering
// breaks where the order first goes wrong (a seq out of place). Events
// with Seq 0 were written before the chain existed and are only counted.
type ChainVerifier struct {
	anchors   map[string]ChainLink
	last      map[string]ChainLink
	lastID    map[string]int64
	broken    map[string]*ChainBreak
	Events    int // chained events checked
	Unchained int // events written before the chain existed
}

// NewChainVerifier returns a verifier that starts the chains of the given
// anchors at them.
func NewChainVerifier(anchors []ChainLink) *ChainVerifier {
	v := &ChainVerifier{anchors: map[string]ChainLink{}, last: map[string]ChainLink{}, lastID: map[string]int64{}, broken: map[string]*ChainBreak{}}
	for _, a := range anchors {
		v.anchors[a.KeyID] = a
	}
	return v
}

// Add checks the next event.
func (v *ChainVerifier) Add(e *Event) {
	if v.broken[e.KeyID] != nil {
		return
	}
	if e.Seq == 0 {
		v.Unchained++
		return
	}
	v.Events++
	fail := func(seq int64, reason string, args ...any) {
		v.broken[e.KeyID] = &ChainBreak{KeyID: e.KeyID, EventID: e.ID, Seq: seq, Reason: fmt.Sprintf(reason, args...)}
	}
	prev, seen := v.last[e.KeyID]
	if !seen {
		prev = ChainLink{KeyID: e.KeyID}
		if a, ok := v.anchors[e.KeyID]; ok {
			prev = ChainLink{KeyID: e.KeyID, Seq: a.Seq - 1, Hash: a.Hash}
		}
	}
	switch {
	case e.Seq != prev.Seq+1:
		if e.Seq > prev.Seq+1 {
			fail(prev.Seq+1, "event with seq %d missing (the next event present has seq %d)", prev.Seq+1, e.Seq)
		} else {
			fail(e.Seq, "event out of order: seq %d after seq %d", e.Seq, prev.Seq)
		}
	case e.PrevHash != prev.Hash:
		fail(e.Seq, "prev_hash %.12s… does not name the previous event's hash %.12s…", e.PrevHash, prev.Hash)
	case EventHash(e) != e.Hash:
		fail(e.Seq, "contents do not hash to the recorded hash (edited)")
	case seen && e.ID != 0 && e.ID <= v.lastID[e.KeyID]:
		fail(e.Seq, "event id %d not after the previous event's id %d (reordered)", e.ID, v.lastID[e.KeyID])
	}
	if v.broken[e.KeyID] == nil {
		v.last[e.KeyID] = ChainLink{KeyID: e.KeyID, Seq: e.Seq, Hash: e.Hash}
		v.lastID[e.KeyID] = e.ID
	}
}

// Finish checks every chain against its head and returns the first break
// of each broken chain, ordered by key. A head beyond the last event seen
// means the chain's tail was deleted; events beyond the head are newer than
// the heads read and are fine.
func (v *ChainVerifier) Finish(heads []ChainLink) []ChainBreak {
	for _, h := range heads {
		if v.broken[h.KeyID] != nil || h.Seq == 0 {
			continue
		}
		last, ok := v.last[h.KeyID]
		if !ok {
			if a, anchored := v.anchors[h.KeyID]; anchored && a.Seq == h.Seq+1 && a.Hash == h.Hash {
				continue // pruned to nothing
			}
			v.broken[h.KeyID] = &ChainBreak{KeyID: h.KeyID, Seq: 1, Reason: fmt.Sprintf("head at seq %d but no event of the chain found", h.Seq)}
			continue
		}
		switch {
		case last.Seq < h.Seq:
			v.broken[h.KeyID] = &ChainBreak{KeyID: h.KeyID, Seq: last.Seq + 1, Reason: fmt.Sprintf("events after seq %d missing: the head is at seq %d", last.Seq, h.Seq)}
		case last.Seq == h.Seq && last.Hash != h.Hash:
			v.broken[h.KeyID] = &ChainBreak{KeyID: h.KeyID, EventID: v.lastID[h.KeyID], Seq: h.Seq, Reason: "the last event's hash is not the head's (edited and rehashed)"}
		}
	}
	var out []ChainBreak
	for _, b := range v.broken {
		out = append(out, *b)
	}
	sortBreaks(out)
	return out
}

func sortBreaks(bs []ChainBreak) {
	for i := 1; i < len(bs); i++ {
		for j := i; j > 0 && bs[j].KeyID < bs[j-1].KeyID; j-- {
			bs[j], bs[j-1] = bs[j-1], bs[j]
		}
	}
}
