package keybrake

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// AuditReport is the outcome of verifying audit chains.
type AuditReport struct {
	Events    int          `json:"events"`    // chained events checked
	Unchained int          `json:"unchained"` // events from before the chain, not checked
	Heads     []ChainLink  `json:"heads"`     // every key's last link: publish these to pin the log
	Anchors   []ChainLink  `json:"anchors"`   // where pruned chains start
	Breaks    []ChainBreak `json:"breaks"`    // the first broken link of each broken chain
}

// OK reports whether every chain verified.
func (r *AuditReport) OK() bool { return len(r.Breaks) == 0 }

// auditLine is one line of an audit export: an anchor, an event or a head.
type auditLine struct {
	Type string `json:"type"` // "anchor", "event" or "head"
	*Event
	Link *ChainLink `json:"link,omitempty"`
}

// VerifyAuditLog checks every chain in s and, when w is not nil, writes
// what it read to w as an export (JSONL: the anchors, the events in
// insertion order, then the heads) that VerifyAuditExport checks offline.
// The heads are read first, so events written meanwhile are newer than
// them and verify as well. It returns an error only if s or w fails; a
// broken chain is in the report.
func VerifyAuditLog(ctx context.Context, s AuditChainService, w io.Writer) (*AuditReport, error) {
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit heads: %w", err)
	}
	anchors, err := s.ChainAnchors(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit anchors: %w", err)
	}
	var enc *json.Encoder
	var bw *bufio.Writer
	if w != nil {
		bw = bufio.NewWriter(w)
		enc = json.NewEncoder(bw)
		for i := range anchors {
			if err := enc.Encode(auditLine{Type: "anchor", Link: &anchors[i]}); err != nil {
				return nil, err
			}
		}
	}
	v := NewChainVerifier(anchors)
	var after int64
	for {
		es, err := s.ChainEvents(ctx, ChainPage{AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("read audit events: %w", err)
		}
		if len(es) == 0 {
			break
		}
		for _, e := range es {
			v.Add(e)
			if enc != nil {
				if err := enc.Encode(auditLine{Type: "event", Event: e}); err != nil {
					return nil, err
				}
			}
		}
		after = es[len(es)-1].ID
	}
	if err := anchorsKept(ctx, s, anchors); err != nil {
		return nil, err
	}
	if enc != nil {
		for i := range heads {
			if err := enc.Encode(auditLine{Type: "head", Link: &heads[i]}); err != nil {
				return nil, err
			}
		}
		if err := bw.Flush(); err != nil {
			return nil, err
		}
	}
	return &AuditReport{Events: v.Events, Unchained: v.Unchained, Heads: heads, Anchors: anchors, Breaks: v.Finish(heads)}, nil
}

// VerifyAuditExport checks an export written by VerifyAuditLog, without the
// store. Returns EINVALID naming the line if the file is not an export.
// To pin the log against someone who rewrites both the events and their
// heads, compare the report's heads with heads published earlier.
func VerifyAuditExport(r io.Reader) (*AuditReport, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var (
		v       *ChainVerifier
		anchors []ChainLink
		heads   []ChainLink
	)
	for n := 1; sc.Scan(); n++ {
		var l auditLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, Errorf(EINVALID, "line %d: not an audit export line: %v", n, err)
		}
		// What is verified must be what every reader of the line reads.
		// encoding/json matches names case-insensitively and keeps the
		// last of repeated ones, so "amount":50,"AMOUNT":500 verified as
		// 500 while jq or a person read 50. A line is accepted only as
		// VerifyAuditLog writes it: encoding what was decoded gives it
		// back byte for byte.
		if canon, err := json.Marshal(l); err != nil || !bytes.Equal(canon, sc.Bytes()) {
			return nil, Errorf(EINVALID, "line %d: not as keybrake writes an export line (a repeated or differently cased name, an unknown field, other spacing or number formats); an export is verified only as written", n)
		}
		switch {
		case l.Type == "anchor" && l.Link != nil && v == nil:
			anchors = append(anchors, *l.Link)
		case l.Type == "event" && l.Event != nil && heads == nil:
			if v == nil {
				v = NewChainVerifier(anchors)
			}
			v.Add(l.Event)
		case l.Type == "head" && l.Link != nil:
			heads = append(heads, *l.Link)
		default:
			return nil, Errorf(EINVALID, "line %d: unexpected %q line (an export has anchors, then events, then heads)", n, l.Type)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if v == nil {
		v = NewChainVerifier(anchors)
	}
	return &AuditReport{Events: v.Events, Unchained: v.Unchained, Heads: heads, Anchors: anchors, Breaks: v.Finish(heads)}, nil
}

// ExportAuditLog is VerifyAuditLog for the events since a time: each key's
// events from its first one at or after since (and every later one of its
// chain, so the export has no gaps), behind an anchor line that names the
// seq and previous hash they start from. A key with no event since is
// anchored past its head. The export verifies offline on its own; its
// anchors' hashes are the last hashes of the export before it, so
// consecutive exports chain. A zero since exports everything, as
// VerifyAuditLog.
func ExportAuditLog(ctx context.Context, s AuditChainService, w io.Writer, since time.Time) (*AuditReport, error) {
	if since.IsZero() {
		return VerifyAuditLog(ctx, s, w)
	}
	heads, err := s.ChainHeads(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit heads: %w", err)
	}
	pruned, err := s.ChainAnchors(ctx)
	if err != nil {
		return nil, fmt.Errorf("read audit anchors: %w", err)
	}
	first := map[string]*Event{} // each key's first chained event since
	if err := eachEvent(ctx, s, func(e *Event) error {
		if e.Seq > 0 && first[e.KeyID] == nil && !e.Time.Before(since) {
			first[e.KeyID] = e
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var anchors []ChainLink
	for _, h := range heads {
		if e := first[h.KeyID]; e != nil {
			anchors = append(anchors, ChainLink{KeyID: h.KeyID, Seq: e.Seq, Hash: e.PrevHash, Time: since})
		} else {
			anchors = append(anchors, ChainLink{KeyID: h.KeyID, Seq: h.Seq + 1, Hash: h.Hash, Time: since})
		}
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for i := range anchors {
		if err := enc.Encode(auditLine{Type: "anchor", Link: &anchors[i]}); err != nil {
			return nil, err
		}
	}
	v := NewChainVerifier(anchors)
	if err := eachEvent(ctx, s, func(e *Event) error {
		if f := first[e.KeyID]; e.Seq == 0 && e.Time.Before(since) || e.Seq > 0 && (f == nil || e.ID < f.ID) {
			return nil
		}
		v.Add(e)
		return enc.Encode(auditLine{Type: "event", Event: e})
	}); err != nil {
		return nil, err
	}
	if err := anchorsKept(ctx, s, pruned); err != nil {
		return nil, err
	}
	for i := range heads {
		if err := enc.Encode(auditLine{Type: "head", Link: &heads[i]}); err != nil {
			return nil, err
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	return &AuditReport{Events: v.Events, Unchained: v.Unchained, Heads: heads, Anchors: anchors, Breaks: v.Finish(heads)}, nil
}

// eachEvent calls fn with every event of s in insertion order.
func eachEvent(ctx context.Context, s AuditChainService, fn func(*Event) error) error {
	var after int64
	for {
		es, err := s.ChainEvents(ctx, ChainPage{AfterID: after, Limit: 1000})
		if err != nil {
			return fmt.Errorf("read audit events: %w", err)
		}
		if len(es) == 0 {
			return nil
		}
		for _, e := range es {
			if err := fn(e); err != nil {
				return err
			}
		}
		after = es[len(es)-1].ID
	}
}

// anchorsKept returns ECONFLICT when the store's anchors are no longer
// those read as before: a prune (serve's retention) moved them while the
// events were read in pages, and the events it deleted are missing from
// what was read, which would verify as a broken chain though no one
// touched the log (TestAttackAudit_PruneDuringVerifyReportsTampering). A
// prune only moves anchors forward, so anchors unchanged mean none ran.
func anchorsKept(ctx context.Context, s AuditChainService, before []ChainLink) error {
	now, err := s.ChainAnchors(ctx)
	if err != nil {
		return fmt.Errorf("read audit anchors: %w", err)
	}
	moved := len(now) != len(before)
	for i := 0; !moved && i < len(now); i++ {
		moved = now[i].KeyID != before[i].KeyID || now[i].Seq != before[i].Seq || now[i].Hash != before[i].Hash
	}
	if moved {
		return Errorf(ECONFLICT, "the audit log was pruned (retention) while it was read, so what was read has gaps that are no tampering; nothing was verified: run again")
	}
	return nil
}
