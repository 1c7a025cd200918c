package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/keybrake/keybrake/chaos"
)

// TestModes runs every mode with a few events under the five strategies
// and asserts the harness's two claims on every mode: the seed's unsafe
// strategy shows the seed's failure (duplicates, or lost charges for
// claim-crash), and full keybrake charges every event exactly once.
func TestModes(t *testing.T) {
	var progress int
	rep, err := chaos.Run(context.Background(), chaos.Options{Events: 20, Seed: 7, Fraction: 0.2, Dir: t.TempDir(),
		Progress: func(chaos.Progress) { progress++ }})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	rep.WriteText(&text)
	t.Logf("\n%s", text.String())
	if want := len(chaos.Modes) * len(chaos.Strategies); len(rep.Rows) != want {
		t.Fatalf("%d rows, want %d", len(rep.Rows), want)
	}
	for _, m := range chaos.Modes {
		t.Run(m.Name, func(t *testing.T) {
			for _, r := range rep.Rows {
				if r.Mode != m.Name {
					continue
				}
				switch r.Strategy {
				case chaos.Unsafe:
					if m.Expect == "lost" && r.Lost == 0 {
						t.Errorf("unsafe: no lost charge: %+v", r)
					}
					if m.Expect == "duplicates" && (r.Duplicates == 0 || r.OverchargedCents == 0) {
						t.Errorf("unsafe: no duplicate: %+v", r)
					}
				case chaos.UnsafeCapped:
					// The cap alone bounds the damage: never more charged
					// than its 110 % of what the events should charge.
					if r.ChargedCents*100 > r.ExpectedCents*110 {
						t.Errorf("unsafe+cap: charged %d cents, cap is 110%% of %d: %+v", r.ChargedCents, r.ExpectedCents, r)
					}
				case chaos.UnsafeGuarded:
					// The guard alone, no ledger: no duplicate charge.
					if r.Duplicates != 0 || r.OverchargedCents != 0 {
						t.Errorf("unsafe+guard: %d duplicates: %+v", r.Duplicates, r)
					}
				case chaos.Full:
					if r.Duplicates != 0 || r.Lost != 0 || r.OverchargedCents != 0 {
						t.Errorf("keybrake: %d duplicates, %d lost: %+v", r.Duplicates, r.Lost, r)
					}
					if r.Charges+r.Declined != r.Events {
						t.Errorf("keybrake: %d charges and %d declines for %d events", r.Charges, r.Declined, r.Events)
					}
				}
			}
		})
	}
	if f := rep.Failures(); len(f) != 0 {
		t.Errorf("Failures: %v", f)
	}
	if progress < len(rep.Rows) {
		t.Errorf("progress called %d times for %d runs", progress, len(rep.Rows))
	}

	t.Run("Report", func(t *testing.T) {
		var js bytes.Buffer
		if err := rep.WriteJSON(&js); err != nil {
			t.Fatal(err)
		}
		var back chaos.Report
		if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Rows) != len(rep.Rows) || len(back.Modes) != len(chaos.Modes) {
			t.Fatalf("JSON round trip: %v, %d rows", err, len(back.Rows))
		}
		var svg, html bytes.Buffer
		if err := rep.WriteSVG(&svg); err != nil || !strings.HasPrefix(svg.String(), "<svg") || !strings.Contains(svg.String(), "nsq-attempts") {
			t.Fatalf("SVG: %v %.200s", err, svg.String())
		}
		if err := rep.WriteHTML(&html); err != nil || !strings.Contains(html.String(), "<svg") || !strings.Contains(html.String(), "claim-crash") {
			t.Fatalf("HTML: %v", err)
		}
		for _, m := range chaos.Modes {
			if !strings.Contains(text.String(), m.Name) {
				t.Errorf("the table has no row for %s", m.Name)
			}
		}
	})
}

// TestReproducible runs one mode twice with the same seed: the injected
// faults, hence the unsafe strategy's duplicates, are the same.
func TestReproducible(t *testing.T) {
	opts := chaos.Options{Events: 40, Seed: 3, Modes: []string{"nsq-attempts"}, Strategies: []chaos.Strategy{chaos.Unsafe}}
	a, err := chaos.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := chaos.Run(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := a.Rows[0], b.Rows[0]
	if ra.Duplicates != rb.Duplicates || ra.OverchargedCents != rb.OverchargedCents || ra.Duplicates == 0 {
		t.Fatalf("same seed, different rows: %+v vs %+v", ra, rb)
	}
}

func TestSelect(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		err  bool
	}{{"all", len(chaos.Modes), false}, {"zmq", 3, false}, {"nsq-attempts,claim-crash", 2, false}, {"nope", 0, true}} {
		ms, err := chaos.SelectModes(strings.Split(tc.in, ","))
		if (err != nil) != tc.err || len(ms) != tc.want {
			t.Errorf("SelectModes(%q) = %d modes, %v", tc.in, len(ms), err)
		}
	}
	if st, err := chaos.ParseStrategies("a,keybrake"); err != nil || len(st) != 2 || st[1] != chaos.Full {
		t.Errorf("ParseStrategies: %v %v", st, err)
	}
	if _, err := chaos.ParseStrategies("bogus"); err == nil {
		t.Error("ParseStrategies accepted bogus")
	}
}
