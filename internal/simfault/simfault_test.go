package simfault_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keybrake/keybrake/internal/simfault"
)

func TestPlan(t *testing.T) {
	var in simfault.Injector
	if _, err := in.Add(simfault.Fault{Mode: "explode"}); err == nil {
		t.Fatal("an unknown mode was accepted")
	}
	id, err := in.Add(simfault.Fault{Method: "POST", Path: "/a/*", Mode: simfault.CutAfter, Nth: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Add(simfault.Fault{Path: "/b", Mode: simfault.FailBefore, Status: 503, Count: 1}); err != nil {
		t.Fatal(err)
	}
	modes := []string{
		in.Plan("POST", "/a/x").Mode, in.Plan("POST", "/a/y").Mode, in.Plan("POST", "/a/z").Mode,
		in.Plan("GET", "/a/x").Mode, in.Plan("GET", "/b").Mode, in.Plan("GET", "/b").Mode,
	}
	want := []string{"", simfault.CutAfter, "", "", simfault.FailBefore, ""}
	for i := range want {
		if modes[i] != want[i] {
			t.Errorf("request %d: mode %q, want %q", i, modes[i], want[i])
		}
	}
	list := in.List()
	if len(list) != 2 || list[0].ID != id || list[0].Matched != 3 || list[0].Fired != 1 || list[1].Fired != 1 {
		t.Errorf("List = %+v", list)
	}
	in.Remove(id)
	in.Clear()
	if len(in.List()) != 0 {
		t.Error("Clear left faults")
	}
}

func TestFaultJSON(t *testing.T) {
	var f simfault.Fault
	if err := json.Unmarshal([]byte(`{"path":"/x","mode":"latency","latency":"250ms"}`), &f); err != nil || f.Latency != 250*time.Millisecond {
		t.Fatalf("duration string: %+v %v", f, err)
	}
	if err := json.Unmarshal([]byte(`{"path":"/x","mode":"latency","latency":40}`), &f); err != nil || f.Latency != 40*time.Millisecond {
		t.Fatalf("milliseconds: %+v %v", f, err)
	}
	if err := json.Unmarshal([]byte(`{"path":"/x","mode":"latency","typo":1}`), &f); err == nil {
		t.Fatal("unknown field accepted")
	}
}
