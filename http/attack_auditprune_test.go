package http_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// pruneAfterAnchors is a store whose retention prune runs right after
// the verifier read the anchors, as serve's pruner may while an operator
// runs `keybrake audit verify` or `export` against the same database.
type pruneAfterAnchors struct {
	keybrake.AuditChainService
	once   sync.Once
	before time.Time
	err    error
}

func (p *pruneAfterAnchors) ChainAnchors(ctx context.Context) ([]keybrake.ChainLink, error) {
	a, err := p.AuditChainService.ChainAnchors(ctx)
	p.once.Do(func() { _, p.err = p.AuditChainService.PruneEvents(ctx, p.before, p.before) })
	return a, err
}

// pruneBetweenPasses prunes once the export's first pass over the events
// (finding each key's first event since) has read them all.
type pruneBetweenPasses struct {
	pruneAfterAnchors
}

func (p *pruneBetweenPasses) ChainAnchors(ctx context.Context) ([]keybrake.ChainLink, error) {
	return p.AuditChainService.ChainAnchors(ctx)
}

func (p *pruneBetweenPasses) ChainEvents(ctx context.Context, pg keybrake.ChainPage) ([]*keybrake.Event, error) {
	es, err := p.AuditChainService.ChainEvents(ctx, pg)
	if err == nil && len(es) == 0 {
		p.once.Do(func() { _, p.err = p.AuditChainService.PruneEvents(ctx, p.before, p.before) })
	}
	return es, err
}

// TestAttackAudit_PruneDuringVerifyReportsTampering: an audit verify or
// export that read the anchors before serve's pruner moved them, and the
// events after, found every pruned key's chain starting past its anchor
// and reported it broken: a log no one touched read as tampered with, and
// the export written then does not verify. A verify or export during a
// prune now fails with an error asking to run it again, and reports no
// break.
func TestAttackAudit_PruneDuringVerifyReportsTampering(t *testing.T) {
	for _, export := range []bool{false, true} {
		e := MustOpen(t)
		_, secret := e.CreateKey(t, `{"daily_usd_cap":100}`)
		charge := func() {
			resp, out := e.Do(t, "POST", "/v1/charges", "amount=500&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("charge: %d %s", resp.StatusCode, out)
			}
		}
		charge()
		charge()
		e.Clock.Advance(time.Hour)
		since := e.Clock.Now()
		charge()
		e.Server.FlushAudit()
		store, before := e.Store.(keybrake.AuditChainService), e.Clock.Now().Add(-time.Minute)
		var (
			rep      *keybrake.AuditReport
			err      error
			pruneErr error
		)
		if export {
			s := &pruneBetweenPasses{pruneAfterAnchors{AuditChainService: store, before: before}}
			rep, err = keybrake.ExportAuditLog(context.Background(), s, discard{}, since.Add(-2*time.Hour))
			pruneErr = s.err
		} else {
			s := &pruneAfterAnchors{AuditChainService: store, before: before}
			rep, err = keybrake.VerifyAuditLog(context.Background(), s, nil)
			pruneErr = s.err
		}
		if pruneErr != nil {
			t.Fatal(pruneErr)
		}
		if err == nil && !rep.OK() {
			t.Errorf("export=%v: an untouched log pruned while read reported broken: %+v", export, rep.Breaks)
		}
		if err == nil {
			t.Errorf("export=%v: no error for a log pruned while it was read", export)
		}
		// Run again, it verifies.
		if rep, err := keybrake.VerifyAuditLog(context.Background(), e.Store.(keybrake.AuditChainService), nil); err != nil || !rep.OK() {
			t.Fatalf("verify after the prune: %+v, %v", rep, err)
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
