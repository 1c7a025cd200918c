package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// load reads the state saved at path; a missing file, or no path, is a
// fresh state.
func load(path string) (*state, error) {
	if path == "" {
		return newState(), nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return newState(), nil
	} else if err != nil {
		return nil, fmt.Errorf("stripesim: load state: %w", err)
	}
	st := &state{}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("stripesim: load state %s: %w", path, err)
	}
	st.index()
	return st, nil
}

// persist saves the state if a StatePath is set, logging a failure: the
// request that changed the state has already succeeded.
func (s *Server) persist() {
	if s.opts.StatePath == "" {
		return
	}
	if err := s.save(); err != nil {
		s.log.Error("stripesim: save state", "path", s.opts.StatePath, "err", err)
	}
}

// save writes the state to StatePath atomically: a temporary file in the
// same directory, renamed over the old one. Saves are serialised so that an
// older snapshot never replaces a newer one.
func (s *Server) save() error {
	path := s.opts.StatePath
	if path == "" {
		return nil
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.mu.Lock()
	b, err := json.Marshal(s.st)
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("stripesim: encode state: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("stripesim: save state: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op once renamed
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("stripesim: save state: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("stripesim: save state: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("stripesim: save state: %w", err)
	}
	return nil
}
