package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/keybrake/keybrake"
)

// readGuards reads the --guards flag: JSON, or @file holding it. It
// decodes strictly (an unknown field is an error, as in the admin API) and
// checks the numbers and names with keybrake.Guards.Validate; the API
// compiles the field rules. It returns the JSON to send.
func readGuards(v string) (json.RawMessage, error) {
	raw := []byte(v)
	if name, ok := strings.CutPrefix(v, "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		raw = b
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var g keybrake.Guards
	if err := dec.Decode(&g); err != nil {
		return nil, fmt.Errorf("not a guards object: %v", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("not a guards object: data after the JSON object")
	}
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return json.RawMessage(raw), nil
}
