package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// NewChild returns a child key of parent with a total cap of m, expiring at
// expires, as a mint would ask for it.
func NewChild(id string, parent *keybrake.Key, m keybrake.Micros, expires time.Time) *keybrake.Key {
	c := NewKey(id)
	c.Total = Ptr(m)
	c.AllowedEndpoints = parent.AllowedEndpoints
	c.ExpiresAt = &expires
	return c
}

// MustMint mints child under parentID at now, or fails the test unless
// the escrow was recorded.
func MustMint(tb testing.TB, s keybrake.Store, parentID string, child *keybrake.Key, now time.Time) keybrake.MintResult {
	tb.Helper()
	res, err := s.MintChild(context.Background(), keybrake.MintArgs{ParentID: parentID, Child: child, Now: now})
	if err != nil {
		tb.Fatalf("MintChild(%s, %s): %v", parentID, child.ID, err)
	}
	if res.OverCap != nil {
		tb.Fatalf("MintChild(%s, %s): over cap: %+v", parentID, child.ID, *res.OverCap)
	}
	return res
}

func testDelegation(t *testing.T, open opener) {
	ctx := context.Background()
	day := T0.Add(2 * time.Hour)
	newParent := func(t *testing.T, s keybrake.Store, total int64) *keybrake.Key {
		p := NewKey("vk_parent")
		p.Total, p.Mint = Ptr(USD(total)), true
		p.AllowedEndpoints = []string{"charges.create", "/v1/refunds"}
		return MustCreateKey(t, s, p)
	}
	t.Run("OK", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		res := MustMint(t, s, p.ID, NewChild("vk_child", p, USD(30), day), T0)
		if res.Child.ParentID != p.ID || res.Escrow.State != keybrake.StateHeld || res.Escrow.Micros != USD(30) || res.Escrow.ObjectID != "vk_child" {
			t.Fatalf("mint: child %+v escrow %+v", res.Child, res.Escrow)
		}
		if c := mustFindKey(t, s, "vk_child"); c.ParentID != p.ID || *c.Total != USD(30) {
			t.Fatalf("stored child: %+v", c)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != USD(30) || sp.Held != USD(30) {
			t.Fatalf("parent spend after mint: %+v", sp)
		}
	})
	t.Run("ErrOverCap", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		MustReserve(t, s, p.ID, "own", USD(50), T0)
		MustMint(t, s, p.ID, NewChild("vk_a", p, USD(30), day), T0)
		res, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: NewChild("vk_b", p, USD(21), day), Now: T0})
		if err != nil || res.OverCap == nil || res.OverCap.Window != keybrake.WindowTotal || res.OverCap.Spent != USD(80) {
			t.Fatalf("mint past the parent's budget: %+v, %v", res, err)
		}
		if _, err := s.FindKeyByID(ctx, "vk_b"); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("refused child stored: %v", err)
		}
		MustMint(t, s, p.ID, NewChild("vk_c", p, USD(20), day), T0) // lands exactly on the cap
	})
	// The mint's admin event commits with it: written when the child is,
	// and not at all when the mint is refused or the event is.
	t.Run("Audited", func(t *testing.T) {
		s := open(t)
		as, ok := s.(keybrake.AdminStore)
		if !ok {
			t.Fatal("the store does not implement keybrake.AdminStore")
		}
		p := newParent(t, s, 100)
		event := func(child, action string) *keybrake.AdminEvent {
			return &keybrake.AdminEvent{Time: T0, Actor: "vault_key:" + p.ID, Action: action, Target: child, Detail: "parent=" + p.ID, Client: "127.0.0.1"}
		}
		e := event("vk_a", "key.mint")
		res, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: NewChild("vk_a", p, USD(60), day), Now: T0, Event: e})
		if err != nil || res.OverCap != nil {
			t.Fatalf("mint: %+v, %v", res, err)
		}
		if got := mustAdminEvents(t, as); len(got) != 1 || e.ID == 0 || got[0].ID != e.ID || got[0].Target != "vk_a" || got[0].Action != "key.mint" {
			t.Fatalf("admin events after a mint: %+v", got)
		}
		// Over the parent's cap: no child, no event.
		res, err = s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: NewChild("vk_b", p, USD(41), day), Now: T0, Event: event("vk_b", "key.mint")})
		if err != nil || res.OverCap == nil {
			t.Fatalf("mint past the cap: %+v, %v", res, err)
		}
		// The event refused (no action): no child, no escrow.
		if _, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: NewChild("vk_c", p, USD(10), day), Now: T0, Event: event("vk_c", "")}); err == nil {
			t.Fatal("a mint whose admin event the store refuses succeeded")
		}
		for _, id := range []string{"vk_b", "vk_c"} {
			if _, err := s.FindKeyByID(ctx, id); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
				t.Fatalf("refused child %s: %v, want ENOTFOUND", id, err)
			}
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Held != USD(60) {
			t.Fatalf("parent's escrows after the refused mints: %+v", sp)
		}
		if got := mustAdminEvents(t, as); len(got) != 1 {
			t.Fatalf("admin events after refused mints: %+v", got)
		}
	})
	t.Run("ErrWider", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		cases := map[string]func(c *keybrake.Key){
			"total_usd_cap":      func(c *keybrake.Key) { c.Total = nil },
			"allowed_endpoints":  func(c *keybrake.Key) { c.AllowedEndpoints = []string{"payouts.create"} },
			"allow_unpriced":     func(c *keybrake.Key) { c.AllowUnpriced = true },
			"allowed_currencies": func(c *keybrake.Key) {},
		}
		p2 := NewKey("vk_scoped")
		p2.Total, p2.AllowedCurrencies, p2.ExpiresAt = Ptr(USD(10)), []string{"usd"}, &day
		MustCreateKey(t, s, p2)
		for param, f := range cases {
			parent := p
			if param == "allowed_currencies" {
				parent = p2
			}
			c := NewChild("vk_w"+param[:5], parent, USD(5), day)
			f(c)
			_, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: parent.ID, Child: c, Now: T0})
			if keybrake.ErrorCode(err) != keybrake.EINVALID || keybrake.ErrorParamOf(err) != param {
				t.Errorf("%s: %v", param, err)
			}
		}
		// A parent whose guards count its requests: a child would count
		// them on its own counters (the same guards, not the same count).
		p3 := NewKey("vk_guarded")
		p3.Total, p3.Mint = Ptr(USD(10)), true
		p3.AllowedEndpoints = []string{"charges.create"}
		p3.Guards = &keybrake.Guards{Velocity: []keybrake.VelocityLimit{{Name: "one", Per: keybrake.PerKey, Limit: 1, WindowSeconds: 60}}}
		MustCreateKey(t, s, p3)
		guarded := NewChild("vk_wguard", p3, USD(5), day)
		guarded.Guards = p3.Guards
		if _, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p3.ID, Child: guarded, Now: T0}); keybrake.ErrorParamOf(err) != "guards" {
			t.Errorf("child of a parent with a velocity limit: %v", err)
		}
		late := NewChild("vk_late", p2, USD(5), day.Add(time.Second))
		late.AllowedCurrencies = []string{"usd"}
		if _, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p2.ID, Child: late, Now: T0}); keybrake.ErrorParamOf(err) != "expires_at" {
			t.Errorf("child outliving its parent: %v", err)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != 0 {
			t.Fatalf("refused mints counted: %+v", sp)
		}
	})
	t.Run("ErrParentRevoked", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		if _, err := s.RevokeKey(ctx, p.ID, T0); err != nil {
			t.Fatal(err)
		}
		_, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: NewChild("vk_c", p, USD(5), day), Now: T0})
		if keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
			t.Fatalf("mint under a revoked parent: %v", err)
		}
	})
	t.Run("UnspentReturns", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		MustMint(t, s, p.ID, NewChild("vk_child", p, USD(40), day), T0)
		r := MustReserve(t, s, "vk_child", "c1", USD(15), T0)
		MustSettle(t, s, keybrake.SettleArgs{ID: r.ID, State: keybrake.StateSettled, SettledMicros: USD(12), Now: T0})
		if oc := MustOverCap(t, s, "vk_child", "c2", USD(29), T0); oc.Window != keybrake.WindowTotal {
			t.Fatalf("child past its own cap: %+v", oc)
		}
		live := MustReserve(t, s, "vk_child", "c3", USD(5), T0)
		if _, err := s.RevokeKey(ctx, "vk_child", T0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if n, err := s.ReturnEscrows(ctx, T0.Add(time.Minute), 0); err != nil || n != 0 {
			t.Fatalf("returned with a live reservation: %d, %v", n, err)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: live.ID, State: keybrake.StateReleased, Now: T0})
		if n, err := s.ReturnEscrows(ctx, T0.Add(time.Minute), 0); err != nil || n != 1 {
			t.Fatalf("ReturnEscrows: %d, %v", n, err)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != USD(12) || sp.Held != 0 {
			t.Fatalf("parent after the child's return: %+v", sp)
		}
		if n, err := s.ReturnEscrows(ctx, T0.Add(time.Hour), 0); err != nil || n != 0 {
			t.Fatalf("second pass: %d, %v", n, err)
		}
	})
	t.Run("ExpiredReturns", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		MustMint(t, s, p.ID, NewChild("vk_child", p, USD(40), day), T0)
		MustReserve(t, s, "vk_child", "c1", USD(7), T0) // stays reserved: the resolver's business
		if n, _ := s.ReturnEscrows(ctx, day.Add(-time.Second), 0); n != 0 {
			t.Fatalf("returned before expiry: %d", n)
		}
		rs, _ := s.FindReservations(ctx, keybrake.ReservationFilter{KeyID: "vk_child"})
		MustSettle(t, s, keybrake.SettleArgs{ID: rs[0].ID, State: keybrake.StateSettled, SettledMicros: USD(7), Now: T0})
		if n, err := s.ReturnEscrows(ctx, day, 0); err != nil || n != 1 {
			t.Fatalf("ReturnEscrows at expiry: %d, %v", n, err)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != USD(7) {
			t.Fatalf("parent after expiry: %+v", sp)
		}
	})
	t.Run("RevokeCascades", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		c := NewChild("vk_child", p, USD(40), day)
		c.Mint = true
		MustMint(t, s, p.ID, c, T0)
		MustMint(t, s, "vk_child", NewChild("vk_grand", c, USD(10), day), T0)
		if sp := MustSpend(t, s, "vk_child", T0, time.UTC); sp.Total != USD(10) {
			t.Fatalf("child's escrow of the grandchild: %+v", sp)
		}
		if _, err := s.RevokeKey(ctx, p.ID, T0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"vk_child", "vk_grand"} {
			if k := mustFindKey(t, s, id); k.Usable(T0.Add(time.Minute)) == nil {
				t.Errorf("%s usable after its ancestor was revoked", id)
			}
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("vk_grand", "g1", USD(1)), Now: T0.Add(time.Minute)}); keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
			t.Fatalf("grandchild reserved after the root was revoked: %v", err)
		}
		// The grandchild returns first; its parent's escrow waits for it.
		n1, _ := s.ReturnEscrows(ctx, T0.Add(time.Minute), 0)
		n2, _ := s.ReturnEscrows(ctx, T0.Add(time.Minute), 0)
		if n1+n2 != 2 {
			t.Fatalf("returned %d then %d escrows, want 2 in all", n1, n2)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != 0 {
			t.Fatalf("root after everything returned: %+v", sp)
		}
	})
	t.Run("ConcurrentMintsNeverExceed", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		var mu sync.Mutex
		minted := 0
		var wg sync.WaitGroup
		for i := 0; i < 24; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				c := NewChild("vk_c"+string(rune('a'+i)), p, USD(10), day)
				res, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: p.ID, Child: c, Now: T0})
				if err != nil {
					t.Errorf("mint %d: %v", i, err)
					return
				}
				if res.OverCap == nil {
					mu.Lock()
					minted++
					mu.Unlock()
				}
			}(i)
		}
		wg.Wait()
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); minted != 10 || sp.Total != USD(100) {
			t.Fatalf("minted %d children, parent total %s; want 10 and $100", minted, sp.Total)
		}
	})
	// A request decided on a clock before the child's revocation (a replica
	// behind the revoker's, or one whose transaction waited) reaches the
	// store after the revocation and the escrow's return: it must be
	// refused, or it spends the child's whole cap outside every cap of the
	// parent (docs/money-model.md).
	t.Run("RevocationFinalBeforeReturn", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		c := NewChild("vk_child", p, USD(40), day)
		c.Mint = true
		MustMint(t, s, p.ID, c, T0)
		MustMint(t, s, "vk_child", NewChild("vk_grand", c, USD(10), day), T0)
		revoked := T0.Add(time.Minute)
		if _, err := s.RevokeKey(ctx, "vk_child", revoked); err != nil {
			t.Fatal(err)
		}
		n1, _ := s.ReturnEscrows(ctx, revoked, 0)
		n2, _ := s.ReturnEscrows(ctx, revoked, 0)
		if n1+n2 != 2 {
			t.Fatalf("returned %d then %d escrows, want 2", n1, n2)
		}
		MustReserve(t, s, p.ID, "own", USD(100), revoked) // the whole cap is the parent's again
		early := revoked.Add(-2 * time.Second)            // the skewed replica's time
		for _, id := range []string{"vk_child", "vk_grand"} {
			_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation(id, "late", USD(10)), Now: early})
			if keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
				t.Errorf("%s reserved at %s, before its revocation at %s but after its escrow returned: %v", id, early, revoked, err)
			}
			if k := mustFindKey(t, s, id); k.Usable(early) == nil || k.Status(early) != keybrake.StatusRevoked {
				t.Errorf("%s usable (%q) before its revocation time", id, k.Status(early))
			}
		}
		if _, err := s.MintChild(ctx, keybrake.MintArgs{ParentID: "vk_child", Child: NewChild("vk_late", c, USD(1), day), Now: early}); keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
			t.Errorf("mint under a key revoked at a later time: %v", err)
		}
		// Any key: a replica behind the revoker's clock reserves no more.
		MustCreateKey(t, s, NewKey("vk_plain"))
		if _, err := s.RevokeKey(ctx, "vk_plain", revoked); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation("vk_plain", "late", USD(1)), Now: early}); keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
			t.Errorf("a key reserved on a clock behind its revocation: %v", err)
		}
		if sp := MustSpend(t, s, p.ID, revoked, time.UTC); sp.Total != USD(100) {
			t.Fatalf("parent: %+v", sp)
		}
		for _, id := range []string{"vk_child", "vk_grand"} {
			if sp := MustSpend(t, s, id, revoked, time.UTC); sp.Total != 0 {
				t.Errorf("%s counted %d after its escrow returned", id, sp.Total)
			}
		}
	})
	// The same for an expiry: ReturnEscrows closes the expired child before
	// returning its escrow, so a request decided before the expiry that
	// reaches the store after the return is refused.
	t.Run("ExpiryClosedBeforeReturn", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		c := NewChild("vk_child", p, USD(40), day)
		c.Mint = true
		MustMint(t, s, p.ID, c, T0)
		MustMint(t, s, "vk_child", NewChild("vk_grand", c, USD(10), day), T0)
		n1, _ := s.ReturnEscrows(ctx, day, 0)
		n2, _ := s.ReturnEscrows(ctx, day, 0)
		if n1+n2 != 2 {
			t.Fatalf("returned %d then %d escrows, want 2", n1, n2)
		}
		early := day.Add(-time.Second)
		for _, id := range []string{"vk_child", "vk_grand"} {
			_, err := s.Reserve(ctx, keybrake.ReserveArgs{Reservation: NewReservation(id, "late", USD(10)), Now: early})
			if keybrake.ErrorCode(err) != keybrake.EUNAUTHORIZED {
				t.Errorf("%s reserved before its expiry but after its escrow returned: %v", id, err)
			}
			k := mustFindKey(t, s, id)
			if !k.ClosedAtExpiry() || k.Status(early) != keybrake.StatusExpired {
				t.Errorf("%s after the return: revoked_at %v, expires_at %v, status %q", id, k.RevokedAt, k.ExpiresAt, k.Status(early))
			}
		}
		if sp := MustSpend(t, s, p.ID, day, time.UTC); sp.Total != 0 {
			t.Fatalf("parent: %+v", sp)
		}
	})
	// A revocation refuses new money, not the settlement of what is in
	// flight: the escrow returns at what the child really spent.
	t.Run("RevokedSettles", func(t *testing.T) {
		s := open(t)
		p := newParent(t, s, 100)
		MustMint(t, s, p.ID, NewChild("vk_child", p, USD(40), day), T0)
		live := MustReserve(t, s, "vk_child", "c1", USD(25), T0)
		if _, err := s.RevokeKey(ctx, "vk_child", T0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		MustSettle(t, s, keybrake.SettleArgs{ID: live.ID, State: keybrake.StateSettled, SettledMicros: USD(22), Now: T0.Add(2 * time.Minute)})
		if n, err := s.ReturnEscrows(ctx, T0.Add(2*time.Minute), 0); err != nil || n != 1 {
			t.Fatalf("ReturnEscrows: %d, %v", n, err)
		}
		if sp := MustSpend(t, s, p.ID, T0, time.UTC); sp.Total != USD(22) || sp.Held != 0 {
			t.Fatalf("parent after the return: %+v", sp)
		}
	})
}

func testApprovals(t *testing.T, open opener) {
	ctx := context.Background()
	newApproval := func(id, idem string) *keybrake.Approval {
		return &keybrake.Approval{ID: id, KeyID: "vk_a", IdempotencyKey: idem, Fingerprint: "fp-" + idem,
			Operation: "refunds.create", Method: "POST", Path: "/v1/refunds", Amount: 15000, Currency: "usd",
			Micros: USD(150), Reason: "above", CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)}
	}
	t.Run("Lifecycle", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		a, created, err := s.RequestApproval(ctx, newApproval("apr_1", "i1"))
		if err != nil || !created || a.State != keybrake.ApprovalPending || !a.ExpiresAt.Equal(T0.Add(time.Hour)) || a.Micros != USD(150) {
			t.Fatalf("RequestApproval: %+v, %v, %v", a, created, err)
		}
		again, created, err := s.RequestApproval(ctx, newApproval("apr_2", "i1"))
		if err != nil || created || again.ID != "apr_1" {
			t.Fatalf("second request under the same key: %+v, %v, %v", again, created, err)
		}
		if err := s.UseApproval(ctx, "apr_1", "res_x", T0); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("use of a pending approval: %v", err)
		}
		d, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_1", Approve: true, By: "alice", Now: T0.Add(time.Minute)})
		if err != nil || d.State != keybrake.ApprovalApproved || d.DecidedBy != "alice" || !d.DecidedAt.Equal(T0.Add(time.Minute)) {
			t.Fatalf("approve: %+v, %v", d, err)
		}
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_1", Approve: false, By: "bob", Now: T0.Add(time.Minute)}); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("second decision: %v", err)
		}
		if err := s.UseApproval(ctx, "apr_1", "res_x", T0.Add(2*time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.UseApproval(ctx, "apr_1", "res_y", T0.Add(2*time.Minute)); err != nil {
			t.Fatalf("using twice: %v", err)
		}
		got, err := s.FindApprovalByKey(ctx, "vk_a", "i1")
		if err != nil || got.State != keybrake.ApprovalUsed || got.ReservationID != "res_x" {
			t.Fatalf("after use: %+v, %v", got, err)
		}
	})
	// A decision commits with its admin event, built from the approval as
	// decided, or not at all.
	t.Run("Audited", func(t *testing.T) {
		s := open(t)
		as, ok := s.(keybrake.AdminStore)
		if !ok {
			t.Fatal("the store does not implement keybrake.AdminStore")
		}
		MustCreateKey(t, s, NewKey("vk_a"))
		if _, _, err := s.RequestApproval(ctx, newApproval("apr_1", "i1")); err != nil {
			t.Fatal(err)
		}
		event := func(action string) func(*keybrake.Approval) *keybrake.AdminEvent {
			return func(a *keybrake.Approval) *keybrake.AdminEvent {
				return &keybrake.AdminEvent{Time: T0, Actor: "alice", Action: action, Target: a.ID, Detail: a.State + " " + a.KeyID, Client: "127.0.0.1"}
			}
		}
		// The event refused: the approval stays pending.
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_1", Approve: true, By: "alice", Now: T0, Event: event("")}); err == nil {
			t.Fatal("a decision whose admin event the store refuses succeeded")
		}
		if a, err := s.FindApprovalByKey(ctx, "vk_a", "i1"); err != nil || a.State != keybrake.ApprovalPending {
			t.Fatalf("after the refused decision: %+v, %v", a, err)
		}
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_1", Approve: true, By: "alice", Now: T0, Event: event("approval.approve")}); err != nil {
			t.Fatal(err)
		}
		got := mustAdminEvents(t, as)
		if len(got) != 1 || got[0].Action != "approval.approve" || got[0].Target != "apr_1" || got[0].Detail != keybrake.ApprovalApproved+" vk_a" {
			t.Fatalf("admin events: %+v", got)
		}
	})
	t.Run("ErrExpired", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		if _, _, err := s.RequestApproval(ctx, newApproval("apr_1", "i1")); err != nil {
			t.Fatal(err)
		}
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_1", Approve: true, By: "alice", Now: T0.Add(time.Hour)}); keybrake.ErrorCode(err) != keybrake.ECONFLICT {
			t.Fatalf("approving an expired approval: %v", err)
		}
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_nope", Approve: true, Now: T0}); keybrake.ErrorCode(err) != keybrake.ENOTFOUND {
			t.Fatalf("unknown approval: %v", err)
		}
	})
	t.Run("Find", func(t *testing.T) {
		s := open(t)
		MustCreateKey(t, s, NewKey("vk_a"))
		for i, idem := range []string{"i1", "i2", "i3"} {
			a := newApproval("apr_"+idem, idem)
			a.CreatedAt = T0.Add(time.Duration(i) * time.Second)
			if _, _, err := s.RequestApproval(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_i2", By: "bob", Now: T0}); err != nil {
			t.Fatal(err)
		}
		pending, err := s.FindApprovals(ctx, keybrake.ApprovalFilter{State: keybrake.ApprovalPending})
		if err != nil || len(pending) != 2 || pending[0].ID != "apr_i3" {
			t.Fatalf("pending: %v, %v", pending, err)
		}
		all, _ := s.FindApprovals(ctx, keybrake.ApprovalFilter{KeyID: "vk_a"})
		if len(all) != 3 {
			t.Fatalf("all: %d", len(all))
		}
	})
}
