package http

import (
	"bytes"
	"encoding/json"

	"github.com/keybrake/keybrake"
)

// decodeGuards reads the admin API's guards field strictly: unknown fields
// are an error, every number is checked, and every field rule is compiled
// and type-checked, so a bad rule is refused when it is set (naming the
// rule and CEL's line and column), never when a request meets it. null or
// {} removes every guard.
func decodeGuards(raw json.RawMessage) (*keybrake.Guards, error) {
	g := &keybrake.Guards{}
	if string(raw) == "null" {
		return g, nil
	}
	if err := strictNames(raw, "guards"); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(g); err != nil {
		return nil, keybrake.ErrorParam("guards", "guards is not valid: %s. Fields: duplicate {window_seconds, match_metadata, allow_override}, velocity [{name, per, operations, limit, window_seconds}], rules [{name, expr, operations}], breaker {refusal_burst, refusal_window_seconds, repeat_body, repeat_window_seconds, spend_multiple, spend_window_seconds, baseline_seconds}.", err)
	}
	if dec.More() {
		return nil, keybrake.ErrorParam("guards", "guards must be one JSON object.")
	}
	for i := range g.Velocity {
		g.Velocity[i].Operations = withAliases(g.Velocity[i].Operations) // aliases.go
	}
	for i := range g.Rules {
		g.Rules[i].Operations = withAliases(g.Rules[i].Operations)
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	if _, err := CompileRules(g.Rules); err != nil {
		return nil, err
	}
	return g, nil
}
