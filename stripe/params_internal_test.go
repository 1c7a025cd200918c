package stripe

import "testing"

// TestParamsRoundTrip walks every parameter params.txt lists, at every
// depth Stripe's form encoding reaches here, and checks that CheckParams
// takes it and refuses an unknown name next to it: the table's grammar
// reads back what the generator wrote.
func TestParamsRoundTrip(t *testing.T) {
	n := 0
	for name, top := range paramsOf() {
		op := Operation{Name: name}
		var walk func(sh *shape, path []string)
		walk = func(sh *shape, path []string) {
			if len(path) > maxDepth+1 {
				t.Fatalf("%s %s: deeper than ParseForm takes (maxDepth)", name, stripeName(path))
			}
			if len(path) > 0 {
				n++
				key := stripeName(path)
				form, err := ParseForm(key + "=x")
				if err != nil {
					t.Fatalf("%s %s: %v", name, key, err)
				}
				if err := CheckParams(op, form, ClassWrite); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
			if sh.keys != nil && len(path) < maxDepth+1 {
				bad := append(append([]string(nil), path...), "zz_not_a_param")
				key := stripeName(bad)
				form, err := ParseForm(key + "=x")
				if err != nil {
					t.Fatalf("%s %s: %v", name, key, err)
				}
				if err := CheckParams(op, form, ClassWrite); err == nil {
					t.Errorf("%s: %s taken", name, key)
				}
			}
			for k, c := range sh.keys {
				walk(c, append(append([]string(nil), path...), k))
			}
			if sh.any != nil {
				walk(sh.any, append(append([]string(nil), path...), "any_key"))
			}
			if sh.list != nil {
				walk(sh.list, append(append([]string(nil), path...), "0"))
			}
		}
		walk(top, nil)
	}
	if n < 10000 {
		t.Errorf("walked %d parameters; is params.txt truncated?", n)
	}
}
