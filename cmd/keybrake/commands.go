package main

import "sort"

// Commands returns the names of keybrake's commands, sorted, so tests can
// check every one (its --help, its errors).
func Commands() []string {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
