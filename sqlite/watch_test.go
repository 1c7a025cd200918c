package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/keybrake/keybrake"
	"github.com/keybrake/keybrake/sqlite"
	"github.com/keybrake/keybrake/storetest"
)

// Every Store on one file tells every watcher of that file about key
// changes, so the proxy's key cache never serves a revoked key.
func TestWatchKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k.db")
	a, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 4)
	if err := a.WatchKeys(ctx, func(id string) { got <- id }); err != nil {
		t.Fatal(err)
	}
	k := storetest.NewKey("vk_watch")
	if err := b.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := b.RevokeKey(ctx, k.ID, storetest.T0); err != nil {
		t.Fatal(err)
	}
	if id := <-got; id != k.ID {
		t.Fatalf("revoke reported %q", id)
	}
	label := "x"
	if _, err := b.UpdateKey(ctx, k.ID, keybrake.KeyUpdate{Label: &label}, storetest.T0); err != nil {
		t.Fatal(err)
	}
	if id := <-got; id != k.ID {
		t.Fatalf("update reported %q", id)
	}
	cancel()
	var _ keybrake.KeyWatcher = a
}
