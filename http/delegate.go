package http

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/keybrake/keybrake"
)

// selfChildrenPath is where a vault-key holder mints a child of its own key,
// authenticated by the vault key itself rather than the admin token.
const selfChildrenPath = "/vault/keys/self/children"

// childView is a minted key as the mint routes answer it.
type childView struct {
	keyView
	EscrowID string `json:"escrow_reservation_id"`
}

// handleAdminMint mints a child of key id for an admin
// (POST /vault/keys/{id}/children).
func (s *Server) handleAdminMint(w http.ResponseWriter, r *http.Request, id string) {
	parent, err := s.Store.FindKeyByID(r.Context(), id)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	actor := ""
	if a := adminIdentity(r.Context()); a != nil {
		actor = a.Name
	}
	s.mintChild(w, r, parent, actor)
}

// serveSelfMint mints a child of the vault key in the Authorization header
// (POST /vault/keys/self/children). The key needs the mint permission; the
// answer is the admin API's, with keybrake's own error codes.
func (s *Server) serveSelfMint(w http.ResponseWriter, r *http.Request) {
	if !s.checkAuthLimit(w, r, true) {
		return
	}
	if r.Method != http.MethodPost {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.ENOTFOUND, "No route for %s %s; mint with POST.", r.Method, selfChildrenPath))
		return
	}
	// Read from the store, not the key cache: a replica that cached the
	// parent before its secret was rotated out elsewhere minted, for the
	// old secret, a child whose own secret outlives the rotation
	// (TestAttackReplicas_NarrowedPolicyOnStaleReplica).
	parent, _, err := s.proxy.authenticateCached(r, s.stripeRoute(), true)
	if err != nil {
		if parent == nil {
			s.limiter.fail(s.clientAddr(r))
		}
		s.writeAdminError(w, r, err)
		return
	}
	if !parent.Mint {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.EFORBIDDEN, "Vault key %s may not mint child keys; an admin can allow it with \"mint\": true.", parent.ID))
		return
	}
	s.mintChild(w, r, parent, "vault_key:"+parent.ID)
}

// mintChild decodes the child's fields over the parent's defaults and asks
// the store to mint it; the store checks the child against the parent's
// policy as it reads it under the parent's lock.
func (s *Server) mintChild(w http.ResponseWriter, r *http.Request, parent *keybrake.Key, actor string) {
	fields, err := decodeObject(r)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if err := checkCountMint(parent); err != nil { // counts.go
		s.writeAdminError(w, r, err)
		return
	}
	for _, name := range []string{"guards", "vendor"} {
		if _, ok := fields[name]; ok {
			s.writeAdminError(w, r, keybrake.ErrorParam(name, "A child key has its parent's %s.", name))
			return
		}
	}
	now := s.Now().UTC().Truncate(time.Microsecond)
	k, err := childDefaults(parent, now)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	var upd keybrake.KeyUpdate
	if err := applyFields(fields, k, &upd, true); err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if k.ExpiresAt != nil && !k.ExpiresAt.After(now) {
		s.writeAdminError(w, r, keybrake.ErrorParam("expires_at", "expires_at %s is not in the future.", k.ExpiresAt.Format(time.RFC3339)))
		return
	}
	secret := randomID(keybrake.VaultKeyPrefix, 32)
	k.ID = randomID("vk_", 24)
	k.SecretHash = HashSecret(secret)
	k.SecretPrefix = secret[:len(keybrake.VaultKeyPrefix)+4]
	escrowID := keybrake.NewReservationID(now)
	detail := fmt.Sprintf("parent=%s escrow=%s", parent.ID, escrowID)
	if k.Total != nil { // else the store refuses the child (CheckChild)
		detail += fmt.Sprintf(" total_usd_cap=%s", *k.Total)
	}
	event := s.newAdminEvent(r, actor, "key.mint", k.ID, detail, "")
	if _, ok := s.Store.(keybrake.AdminStore); !ok {
		event = nil // a store without the admin audit log
	}
	res, err := s.Store.MintChild(r.Context(), keybrake.MintArgs{ParentID: parent.ID, Child: k, EscrowID: escrowID, Now: now, Event: event})
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	if o := res.OverCap; o != nil {
		s.writeAdminError(w, r, keybrake.Errorf(keybrake.EOVERCAP,
			"Minting a child of $%s would exceed the %s cap of $%s on vault key %s ($%s counted, $%s left). Nothing was minted.",
			o.Requested, o.Window, o.Cap, parent.ID, o.Spent, o.Remaining()))
		return
	}
	s.logger().Info("key minted", "actor", actor, "parent", parent.ID, "child", res.Child.ID)
	s.audit.add(&keybrake.Event{KeyID: parent.ID, Time: now, Operation: keybrake.OpEscrow, Method: r.Method,
		Path: r.URL.EscapedPath(), Amount: res.Escrow.Amount, Currency: "usd", Micros: res.Escrow.Micros,
		Decision: keybrake.DecisionAllow, Reason: "minted child " + res.Child.ID + " by " + actor, ObjectID: res.Child.ID,
		ReservationID: res.Escrow.ID})
	b, err := s.budget(r.Context(), res.Child, now)
	if err != nil {
		s.writeAdminError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, childView{
		keyView:  keyView{Key: present(res.Child), Object: "vault_key", VaultKey: secret, Budget: b},
		EscrowID: res.Escrow.ID,
	})
}

// childDefaults is the child a mint starts from: the parent's scope,
// per-request, daily and monthly caps, zone, approval policy and guards,
// expiring at the latest time the parent allows (ChildDeadline). The total
// cap has no default: it is the escrow, and the caller must choose it.
func childDefaults(parent *keybrake.Key, now time.Time) (*keybrake.Key, error) {
	deadline, err := keybrake.ChildDeadline(parent, now)
	if err != nil {
		return nil, err
	}
	k := &keybrake.Key{
		Vendor: parent.Vendor, Label: "child of " + parent.ID, Timezone: parent.Timezone,
		Caps:              keybrake.Caps{PerRequest: parent.PerRequest, Daily: parent.Daily, Monthly: parent.Monthly},
		AllowedEndpoints:  slices.Clone(parent.AllowedEndpoints),
		AllowedCustomers:  slices.Clone(parent.AllowedCustomers),
		AllowedAccounts:   slices.Clone(parent.AllowedAccounts),
		AllowedCurrencies: slices.Clone(parent.AllowedCurrencies),
		Guards:            parent.Guards,
		ExpiresAt:         deadline,
		CreatedAt:         now, UpdatedAt: now,
	}
	if parent.Approval != nil {
		a := parent.Approval.Clone()
		k.Approval = &a
	}
	return k, nil
}

// checkChildUpdate refuses an update that would make a child wider than
// its parent or raise its total cap above its escrow; an admin narrows a
// child, never widens it.
func (s *Server) checkChildUpdate(r *http.Request, id string, upd keybrake.KeyUpdate) error {
	k, err := s.Store.FindKeyByID(r.Context(), id)
	if err != nil || k.ParentID == "" {
		return err
	}
	parent, err := s.Store.FindKeyByID(r.Context(), k.ParentID)
	if err != nil {
		return err
	}
	escrow := k.Total
	k.Apply(upd)
	if escrow != nil && (k.Total == nil || *k.Total > *escrow) {
		return keybrake.ErrorParam("total_usd_cap", "A child's total cap is its escrow of $%s and cannot be raised.", *escrow)
	}
	// Checked as at minting: the deadline is the one the child was minted
	// under, the scope and caps the parent's as they are now.
	return keybrake.CheckChild(k, parent, k.CreatedAt)
}

// decodeApprovalPolicy reads the admin field "approval" strictly: unknown
// fields, a negative or malformed threshold, unknown operation names and a
// TTL outside (0, MaxApprovalTTL] are refused, naming the field.
func decodeApprovalPolicy(raw json.RawMessage) (*keybrake.ApprovalPolicy, error) {
	if string(raw) == "null" {
		return &keybrake.ApprovalPolicy{}, nil
	}
	if err := strictNames(raw, "approval"); err != nil {
		return nil, err
	}
	var v struct {
		AboveUSD   *keybrake.Micros `json:"above_usd"`
		Operations []string         `json:"operations"`
		TTLSeconds *int64           `json:"ttl_seconds"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, keybrake.ErrorParam("approval", `approval must be an object {"above_usd": 100, "operations": ["refunds.create"], "ttl_seconds": 3600}: %s`, err)
	}
	ops, err := validateList("approval.operations", v.Operations)
	if err != nil {
		return nil, err
	}
	for i, op := range ops {
		if !opNamePattern.MatchString(op) {
			return nil, keybrake.ErrorParam("approval.operations", "approval.operations[%d] %q is not an operation name like refunds.create.", i, op)
		}
	}
	ops = withAliases(ops) // aliases.go
	p := &keybrake.ApprovalPolicy{AboveUSD: v.AboveUSD, Operations: ops}
	if v.TTLSeconds != nil {
		if *v.TTLSeconds <= 0 || time.Duration(*v.TTLSeconds)*time.Second > keybrake.MaxApprovalTTL {
			return nil, keybrake.ErrorParam("approval.ttl_seconds", "approval.ttl_seconds must be 1 to %d: an approved retry must reach Stripe inside its 24-hour idempotency window.", int64(keybrake.MaxApprovalTTL/time.Second))
		}
		p.TTLSeconds = *v.TTLSeconds
	}
	if p.IsZero() {
		return nil, keybrake.ErrorParam("approval", "approval names neither above_usd nor operations; use null to remove it.")
	}
	return p, nil
}

// returnEscrows settles the escrows of children that ended, so what they
// did not spend counts no more against their parents. The resolver loop
// runs it on every pass, and a revocation runs it at once; failures are
// logged and left for the next pass.
func (s *Server) returnEscrows(ctx context.Context) {
	n, err := s.Store.ReturnEscrows(ctx, s.Now(), 0)
	if err != nil {
		s.logger().Warn("returning child escrows failed; will retry", "err", err)
	} else if n > 0 {
		s.logger().Info("child escrows returned to their parents", "count", n)
	}
}
