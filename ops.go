package keybrake

import "context"

// SchemaChecker is implemented by stores that can tell whether their
// schema is complete, for a readiness probe.
type SchemaChecker interface {
	// CheckSchema returns nil when every migration this build embeds is
	// recorded as applied. Returns EUNAVAILABLE if the store cannot be
	// reached, EINTERNAL naming the first missing migration otherwise.
	CheckSchema(ctx context.Context) error
}
