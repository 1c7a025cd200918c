package chaos

import "context"

type natsBroker struct{}

func (b *natsBroker) close() {}

type jsSpec int

const (
	jsAckWaitSpec jsSpec = iota
	jsTwoDurablesSpec
	jsRecreateSpec
)

func driveJetStream(ctx context.Context, r *run, s jsSpec) error { return nil }
func driveZMQRequest(ctx context.Context, r *run, dealer bool) error { return nil }
func driveZMQPipeline(ctx context.Context, r *run) error { return nil }
