package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/keybrake/keybrake"
)

// testApprovalParams checks that an approval keeps the parameters its
// approver sees through every read and a decision, and that an approval
// recorded without them (as before the params column) reads back nil, so
// the console says "parameters not recorded" rather than "no parameters".
func testApprovalParams(t *testing.T, open opener) {
	ctx := context.Background()
	s := open(t)
	MustCreateKey(t, s, NewKey("vk_a"))
	want := &keybrake.ApprovalParams{List: []keybrake.ApprovalParam{
		{Name: "amount", Value: "50000"},
		{Name: "destination", Value: "acct_1Attacker"},
		{Name: "description", Value: "<b>é</b> \"quoted\" \\u000A"},
		{Name: "client_secret", Value: "(not shown)", Masked: true},
	}, More: 3}
	mk := func(id, idem string, p *keybrake.ApprovalParams) *keybrake.Approval {
		return &keybrake.Approval{ID: id, KeyID: "vk_a", IdempotencyKey: idem, Fingerprint: "fp-" + idem,
			Operation: "transfers.create", Method: "POST", Path: "/v1/transfers", Amount: 50000, Currency: "usd",
			Micros: USD(500), Reason: "above", Params: p, CreatedAt: T0, ExpiresAt: T0.Add(time.Hour)}
	}
	a, _, err := s.RequestApproval(ctx, mk("apr_p1", "i1", want))
	if err != nil || !reflect.DeepEqual(a.Params, want) {
		t.Fatalf("RequestApproval: %+v, %v", a, err)
	}
	empty := &keybrake.ApprovalParams{List: []keybrake.ApprovalParam{}}
	if _, _, err := s.RequestApproval(ctx, mk("apr_p2", "i2", empty)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RequestApproval(ctx, mk("apr_p3", "i3", nil)); err != nil {
		t.Fatal(err)
	}
	check := func(id string, want *keybrake.ApprovalParams) {
		t.Helper()
		byID, err := s.FindApprovalByID(ctx, id)
		if err != nil || !reflect.DeepEqual(byID.Params, want) {
			t.Fatalf("FindApprovalByID(%s).Params = %+v, %v; want %+v", id, byID.Params, err, want)
		}
		byKey, err := s.FindApprovalByKey(ctx, "vk_a", byID.IdempotencyKey)
		if err != nil || !reflect.DeepEqual(byKey.Params, want) {
			t.Fatalf("FindApprovalByKey(%s).Params = %+v, %v", id, byKey.Params, err)
		}
	}
	check("apr_p1", want)
	check("apr_p2", empty)
	check("apr_p3", nil)
	d, err := s.DecideApproval(ctx, keybrake.DecideArgs{ID: "apr_p1", Approve: true, By: "alice", Now: T0.Add(time.Minute)})
	if err != nil || !reflect.DeepEqual(d.Params, want) {
		t.Fatalf("DecideApproval: %+v, %v", d, err)
	}
	list, err := s.FindApprovals(ctx, keybrake.ApprovalFilter{KeyID: "vk_a"})
	if err != nil || len(list) != 3 {
		t.Fatalf("FindApprovals: %d, %v", len(list), err)
	}
	for _, a := range list {
		if (a.ID == "apr_p3") != (a.Params == nil) {
			t.Fatalf("FindApprovals: %s has params %+v", a.ID, a.Params)
		}
	}
}
