package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/chaos"
)

func TestQuick(t *testing.T) {
	modes := strings.Split(os.Getenv("CHAOS_MODES"), ",")
	rep, err := chaos.Run(context.Background(), chaos.Options{Events: 100, Seed: 1, Modes: modes, Dir: t.TempDir()})
	if rep != nil {
		rep.WriteText(os.Stdout)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Failures() {
		t.Error(f)
	}
}
