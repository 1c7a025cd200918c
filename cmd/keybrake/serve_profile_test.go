package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
	"github.com/keybrake/keybrake/internal/kbtest"
)

// TestServeProfileWriteFails: a profile that cannot be written when serve
// stops (here a device that is always full) fails the command with the
// flag, the file and the cause; runtime/pprof itself drops the CPU
// profile's write errors.
func TestServeProfileWriteFails(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full:", err)
	}
	for _, flag := range []string{"--cpuprofile", "--memprofile"} {
		t.Run(strings.TrimPrefix(flag, "--"), func(t *testing.T) {
			env, out := testEnv(map[string]string{"STRIPE_SECRET_KEY": "sk_test_x"})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() {
				done <- main.Run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(t.TempDir(), "k.db"), flag, "/dev/full"}, env)
			}()
			kbtest.Eventually(t, "serve started", func() bool { return strings.Contains(out.String(), "keybrake serving") })
			cancel()
			err := <-done
			if err == nil || !strings.Contains(err.Error(), flag+" /dev/full not written") || !strings.Contains(err.Error(), "no space left") {
				t.Fatalf("serve with %s /dev/full stopped with %v, want the profile's write error\n%s", flag, err, out)
			}
		})
	}
}
