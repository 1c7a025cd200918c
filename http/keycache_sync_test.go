package http_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/keybrake/keybrake"
	khttp "github.com/keybrake/keybrake/http"
	"github.com/keybrake/keybrake/sqlite"
)

// findCounter is a SQLite store that counts key lookups by secret.
type findCounter struct {
	*sqlite.Store
	finds atomic.Int64
}

func (f *findCounter) FindKeyBySecretHash(ctx context.Context, hash string) (*keybrake.Key, error) {
	f.finds.Add(1)
	return f.Store.FindKeyBySecretHash(ctx, hash)
}

// On SQLite, whose key reports are never late (one process a file), a
// charge decided on a cached key does not read the key again: the re-read
// that keeps replicas from deciding money on a stale key
// (TestAttackReplicas_NarrowedPolicyOnStaleReplica) would cost every
// charge a query for nothing. A key changed through the admin API is
// still read again at once.
func TestKeyCacheSynchronousStoreNotReread(t *testing.T) {
	var fc *findCounter
	e := MustOpen(t, func(s *khttp.Server) {
		fc = &findCounter{Store: s.Store.(*sqlite.Store)}
		s.Store = fc
	})
	id, secret := e.CreateKey(t, `{"daily_usd_cap":"100","allowed_endpoints":["charges.create"]}`)
	charge := func() int {
		resp, _ := e.Do(t, "POST", "/stripe/v1/charges", "amount=100&currency=usd&source=tok_visa", map[string]string{"Authorization": "Bearer " + secret})
		return resp.StatusCode
	}
	for range 3 {
		if code := charge(); code != 200 {
			t.Fatalf("charge: %d", code)
		}
	}
	if n := fc.finds.Load(); n != 1 {
		t.Fatalf("three charges read the key %d times, want once (then the cache)", n)
	}
	if resp, out := e.Admin(t, "PATCH", "/vault/keys/"+id, `{"allowed_endpoints":["charges.retrieve"]}`); resp.StatusCode != 200 {
		t.Fatalf("narrow the key: %d %s", resp.StatusCode, out)
	}
	if code := charge(); code != 403 {
		t.Fatalf("a charge after charges.create was taken away: %d, want 403", code)
	}
}
