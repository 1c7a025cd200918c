package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	main "github.com/keybrake/keybrake/cmd/keybrake"
)

// keybrake chaos on two NSQ modes: the table on stdout, progress on
// stderr, the JSON, SVG and HTML files, settings from flags and from the
// environment.
func TestChaos(t *testing.T) {
	dir := t.TempDir()
	jsonFile, svgFile, htmlFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg"), filepath.Join(dir, "r.html")
	env, out := testEnv(map[string]string{"KEYBRAKE_CHAOS_SEED": "5", "KEYBRAKE_CHAOS_EVENTS": "20", "KEYBRAKE_CHAOS_HTML": htmlFile})
	err := main.Run(context.Background(), []string{"chaos", "--modes", "claim-crash,producer-twice", "--fraction", "0.2",
		"--json", jsonFile, "--svg", svgFile}, env)
	if err != nil {
		t.Fatalf("chaos: %v\n%s", err, out)
	}
	s := out.String()
	for _, want := range []string{"duplicates", "over-cap refused", "USD overcharged", "claim-crash", "producer-twice",
		"keybrake", "[12/12] producer-twice", "unsafe+guard", "seed 5, 20 events per row"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	var rep struct {
		Seed uint64
		Rows []struct {
			Mode, Strategy   string
			Duplicates, Lost int
		}
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil || json.Unmarshal(b, &rep) != nil || rep.Seed != 5 || len(rep.Rows) != 12 {
		t.Fatalf("JSON report: %v %s", err, b)
	}
	for _, f := range []string{svgFile, htmlFile} {
		if b, err := os.ReadFile(f); err != nil || !strings.Contains(string(b), "<svg") {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestChaosFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ErrStrategy", []string{"--strategies", "yolo"}, "--strategies"},
		{"ErrMode", []string{"--modes", "kafka-offsets"}, "--modes"},
		{"ErrEvents", []string{"--events", "0"}, "--events"},
		{"ErrFraction", []string{"--fraction", "2"}, "--fraction"},
		{"ErrArgs", []string{"extra"}, "no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, out := testEnv(nil)
			err := main.Run(context.Background(), append([]string{"chaos"}, tc.args...), env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q\n%s", err, tc.want, out)
			}
		})
	}
	t.Run("Help", func(t *testing.T) {
		env, out := testEnv(nil)
		main.Run(context.Background(), []string{"chaos", "--help"}, env)
		for _, want := range []string{"KEYBRAKE_CHAOS_EVENTS", "KEYBRAKE_CHAOS_MODES", "KEYBRAKE_CHAOS_SVG", "nsq-conn-uuid", "zmq-dealer-identity"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("--help lacks %q", want)
			}
		}
	})
}
