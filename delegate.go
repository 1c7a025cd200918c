package keybrake

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"time"
)

// OpEscrow is the operation of a parent's escrow reservation: the part of
// the parent's budget a child key was minted with.
const OpEscrow = "keybrake.escrow"

// Child keys carve their budget out of a parent's. Minting a child reserves
// the child's total cap from what the parent has left, in one transaction
// that holds the parent's lock, as an escrow: a reservation of the parent
// (operation OpEscrow, state held, ObjectID the child's ID) that counts
// against every cap of the parent like any hold. The child then spends
// against its own caps only; it can never spend more than its total cap,
// which is the escrow, so the children of a key together never spend more
// than the parent had left.
//
// The lifecycle of an escrow, one line per transition:
//
//	(none)  --MintChild, the parent's caps hold-->                 held     (the child's total cap)
//	held    --the child expired or was revoked, nothing of it live--> settled (at what the child counted;
//	                                                                           the rest returns to the parent)
//
// A child revoked or expired with reservations still live (reserved,
// uncertain, held) keeps its escrow held until they end: what they will
// count is not known yet. Revoking a key revokes its descendants in the
// same transaction.
type DelegationService interface {
	// MintChild creates args.Child under args.ParentID and escrows the
	// child's total cap from the parent, in one transaction holding the
	// parent's lock that reads the parent's current policy and spend. The
	// child must be narrower than the parent at args.Now (CheckChild). The
	// escrow counts against every cap of the parent but the per-request one
	// (the child's per-request cap is bounded by the parent's instead). Over
	// a cap it records nothing and returns OverCap. Returns ENOTFOUND for an
	// unknown parent, EUNAUTHORIZED for a parent revoked, expired or
	// suspended at Now, EINVALID for a child wider than the parent or
	// without a total cap, ECONFLICT for a taken ID or secret hash.
	MintChild(ctx context.Context, args MintArgs) (MintResult, error)

	// ReturnEscrows settles, at what each child counted, the held escrows
	// of children revoked or expired at now that have no live reservation,
	// so what a child did not spend counts no more against its parent.
	// Returns how many it settled, at most limit (0 means 100).
	ReturnEscrows(ctx context.Context, now time.Time, limit int) (int, error)
}

// MintArgs asks for a child key.
type MintArgs struct {
	ParentID string
	Child    *Key // complete but for ParentID, which MintChild sets; Child.Total is the escrow
	EscrowID string
	Now      time.Time
	// Event, if not nil, is appended to the admin audit log in the mint's
	// transaction (its ID set): a child is never live without the entry
	// saying who minted it. A mint refused (OverCap or an error) writes none.
	Event *AdminEvent
}

// MintResult is the store's decision on a child.
type MintResult struct {
	Child   *Key
	Escrow  *Reservation // the parent's reservation of the child's budget
	OverCap *OverCap     // set, and nothing recorded, when the parent's budget is short
}

// EscrowCaps are the caps of the parent an escrow is checked against: all
// but the per-request one, since an escrow is a budget, not a request.
func EscrowCaps(parent Caps) Caps {
	parent.PerRequest = nil
	return parent
}

// ChildDeadline returns the latest expiry a child of parent minted at now
// may have, or nil for none: the parent's expiry, and the end of the
// parent's current day or month when it caps them, because the escrow is
// counted in the parent's day and month of minting only; a child still
// spending in a later window would spend outside the window that counted
// it.
func ChildDeadline(parent *Key, now time.Time) (*time.Time, error) {
	loc, err := parent.Location()
	if err != nil {
		return nil, err
	}
	var d *time.Time
	earlier := func(t time.Time) {
		if d == nil || t.Before(*d) {
			d = &t
		}
	}
	if parent.ExpiresAt != nil {
		earlier(*parent.ExpiresAt)
	}
	if parent.Daily != nil {
		earlier(DayReset(now, loc))
	}
	if parent.Monthly != nil {
		earlier(MonthReset(now, loc))
	}
	return d, nil
}

// CheckChild returns nil if child is no wider than parent at now, or
// EINVALID naming the first field that is wider: the operations, customers,
// accounts and currencies are a subset of the parent's; the caps are set and
// at most the parent's (a total cap is required: it is the escrow); expiry
// is no later than ChildDeadline; unpriced operations, secret reads and
// minting only if the parent has them; an approval requirement at least as
// strict as the parent's; the parent's guards exactly; the parent's scope
// exactly, and no count caps nor counting guards (Guards.Counts) on the
// parent.
func CheckChild(child, parent *Key, now time.Time) error {
	if child.Vendor != parent.Vendor {
		return ErrorParam("vendor", "A child key has its parent's vendor.")
	}
	if child.Total == nil || *child.Total <= 0 {
		return ErrorParam("total_usd_cap", "A child key needs a positive total_usd_cap: it is reserved from the parent's budget.")
	}
	for _, c := range []struct {
		param         string
		child, parent *Micros
	}{
		{"per_request_usd_cap", child.PerRequest, parent.PerRequest},
		{"daily_usd_cap", child.Daily, parent.Daily},
		{"monthly_usd_cap", child.Monthly, parent.Monthly},
		{"total_usd_cap", child.Total, parent.Total},
	} {
		if c.parent != nil && (c.child == nil || *c.child > *c.parent) {
			return ErrorParam(c.param, "%s must be set and at most the parent's $%s.", c.param, *c.parent)
		}
	}
	if err := endpointsWithin(child.AllowedEndpoints, parent.AllowedEndpoints); err != nil {
		return err
	}
	for _, l := range []struct {
		param         string
		child, parent []string
	}{
		{"allowed_customers", child.AllowedCustomers, parent.AllowedCustomers},
		{"allowed_accounts", child.AllowedAccounts, parent.AllowedAccounts},
		{"allowed_currencies", child.AllowedCurrencies, parent.AllowedCurrencies},
	} {
		if len(l.parent) == 0 {
			continue
		}
		if len(l.child) == 0 {
			return ErrorParam(l.param, "The parent allows only %s; the child must list a subset.", strings.Join(l.parent, ", "))
		}
		for _, v := range l.child {
			if !slices.Contains(l.parent, v) {
				return ErrorParam(l.param, "%s %q is not allowed to the parent.", l.param, v)
			}
		}
	}
	deadline, err := ChildDeadline(parent, now)
	if err != nil {
		return err
	}
	if deadline != nil && (child.ExpiresAt == nil || child.ExpiresAt.After(*deadline)) {
		return ErrorParam("expires_at", "A child of %s must expire by %s (the parent's expiry, or the end of the day or month the parent caps and the escrow counts in).", parent.ID, deadline.UTC().Format(time.RFC3339))
	}
	for _, f := range []struct {
		param         string
		child, parent bool
	}{
		{"allow_unpriced", child.AllowUnpriced, parent.AllowUnpriced},
		{"allow_secret_reads", child.AllowSecretReads, parent.AllowSecretReads},
		{"mint", child.Mint, parent.Mint},
	} {
		if f.child && !f.parent {
			return ErrorParam(f.param, "%s cannot be true on a child when its parent does not have it.", f.param)
		}
	}
	if !child.Approval.AtLeast(parent.Approval) {
		return ErrorParam("approval", "A child's approval requirement must be at least as strict as the parent's.")
	}
	if !sameGuards(child.Guards, parent.Guards) {
		return ErrorParam("guards", "A child key has its parent's guards.")
	}
	// Minting refuses a parent with a scope or count caps; one given them
	// later must not leave its children wider: a child's messages, calls
	// and emails are not counted against the parent's count caps, and its
	// scope is not checked against the parent's but for being the same.
	if parent.CountCaps.Any() {
		return ErrorParam("count_caps", "The parent has count caps, which its children's messages, calls and emails are not counted against.")
	}
	// A child carries its parent's guards, but counts them on its own
	// counters: each child of a key limited to one charge a customer a
	// day could charge that customer again, and the duplicate guard
	// never compared one child's charge with another's or the parent's.
	if parent.Guards.Counts() {
		return ErrorParam("guards", "The parent has guards that count its requests (duplicate, velocity, breaker), which its children's requests are not counted in.")
	}
	if ps := ScopeOf(parent); ps != nil && !reflect.DeepEqual(ScopeOf(child), ps) {
		return ErrorParam(parent.Vendor+"_scope", "A child key of a key with a %s scope has the parent's scope exactly.", parent.Vendor)
	}
	return nil
}

// endpointsWithin checks that every entry of child is covered by parent:
// "*" only by "*", an operation by itself or a path prefix of its path's
// resource, a path prefix by a shorter or equal one.
func endpointsWithin(child, parent []string) error {
	if slices.Contains(parent, AllEndpoints) {
		return nil
	}
	for i, c := range child {
		if !endpointCovered(c, parent) {
			return ErrorParam("allowed_endpoints", "allowed_endpoints[%d] %q is not allowed to the parent (%s).", i, c, strings.Join(parent, ", "))
		}
	}
	return nil
}

func endpointCovered(c string, parent []string) bool {
	for _, p := range parent {
		switch {
		case c == p:
			return true
		case strings.HasPrefix(p, "/") && strings.HasPrefix(c, p+"/"):
			return true
		}
	}
	return false
}

// sameGuards reports whether a and b guard the same way; nil and a zero
// Guards are the same.
func sameGuards(a, b *Guards) bool {
	if a.IsZero() || b.IsZero() {
		return a.IsZero() && b.IsZero()
	}
	return reflect.DeepEqual(a, b)
}
