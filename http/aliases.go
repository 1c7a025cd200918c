package http

import (
	"slices"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/stripe"
)

// withAliases returns ops with the other names of each Stripe operation it
// names added after it (stripe.Aliases), each name once. A key's policy
// lists (approval operations, field rule and velocity limit operations)
// are stored this way, so that one naming refunds.create also covers
// POST /v1/charges/{id}/refund, the same refund by its legacy path; the
// admin API's answer shows the names added.
func withAliases(ops []string) []string {
	if len(ops) == 0 {
		return ops
	}
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		names := stripe.Aliases(op)
		if names == nil {
			names = []string{op}
		}
		for _, n := range names {
			if !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// approvalRequires is ApprovalPolicy.Requires of op under any of its names,
// for policies stored before their lists named the aliases.
func approvalRequires(p *keybrake.ApprovalPolicy, op string, m keybrake.Micros) string {
	why := p.Requires(op, m)
	for _, alias := range stripe.Aliases(op) {
		if why != "" {
			break
		}
		why = p.Requires(alias, m)
	}
	return why
}

// namesOperation reports whether ops names op under any of its names.
func namesOperation(ops []string, op string) bool {
	if slices.Contains(ops, op) {
		return true
	}
	for _, alias := range stripe.Aliases(op) {
		if slices.Contains(ops, alias) {
			return true
		}
	}
	return false
}
