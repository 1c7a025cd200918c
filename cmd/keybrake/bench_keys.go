package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/keybrake/keybrake"
)

// spreadKeys creates the --keys beyond the first, with the same caps (body),
// so that proxied requests can spread over them: one hot key measures a
// key's lock, many keys the store's concurrency.
func (b *bench) spreadKeys(body string) error {
	b.keyIDs = []string{b.keyID}
	if b.cfg.Keys <= 1 {
		return nil
	}
	b.vaultKeys = []string{b.vaultKey}
	for len(b.vaultKeys) < b.cfg.Keys {
		req, _ := http.NewRequest("POST", b.proxies[0].URL()+"/vault/keys", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer kbadm_bench")
		var key struct {
			ID       string `json:"id"`
			VaultKey string `json:"vault_key"`
		}
		if err := b.doJSON(req, &key); err != nil {
			return fmt.Errorf("create bench key %d: %w", len(b.vaultKeys)+1, err)
		}
		b.vaultKeys = append(b.vaultKeys, key.VaultKey)
		b.keyIDs = append(b.keyIDs, key.ID)
	}
	return nil
}

// benchSpend waits for the settlements still queued, then returns the total
// spend of the bench keys.
func (b *bench) benchSpend(ctx context.Context) (keybrake.Micros, error) {
	for _, s := range b.stores {
		if ls, ok := s.(keybrake.LaterSettler); ok {
			if err := ls.FlushSettlements(ctx); err != nil {
				return 0, err
			}
		}
	}
	var total keybrake.Micros
	for _, id := range b.keyIDs {
		k, err := b.stores[0].FindKeyByID(ctx, id)
		if err != nil {
			return 0, err
		}
		loc, _ := k.Location()
		day, month := keybrake.Buckets(time.Now(), loc)
		sp, err := b.stores[0].Spend(ctx, id, day, month)
		if err != nil {
			return 0, err
		}
		total += sp.Total
	}
	return total, nil
}

func settleMode(sync bool) string {
	if sync {
		return "before answering (--sync-settle)"
	}
	return "after answering"
}
