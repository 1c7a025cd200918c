package keybrake

import "context"

// LaterSettler is implemented by stores that can settle a reservation off
// the request path: the proxy answers the client as soon as the upstream
// has, and the settlement commits shortly after, in a batch with others.
//
// Deferring a settlement is safe because nothing is counted less meanwhile:
// until it commits, the reservation stays reserved and counted in full
// (settling to settled only ever lowers or keeps the count), and if the
// process dies first, the resolver leases the reservation once it is stale
// and settles it by idempotent replay (SpendService.LeaseUncertain).
type LaterSettler interface {
	// SettleLater queues a settlement to settled and returns before it
	// commits. done, if not nil, is called once with Settle's outcome when
	// it has committed or failed. The settlement runs with ctx's values but
	// not its cancellation. Returns EINVALID, and queues nothing, for a
	// state other than settled or a negative amount.
	SettleLater(ctx context.Context, args SettleArgs, done func(*Reservation, error)) error

	// FlushSettlements waits until no settlement queued by SettleLater is
	// left, committed or failed. Returns ctx's error if ctx ends first.
	FlushSettlements(ctx context.Context) error
}
