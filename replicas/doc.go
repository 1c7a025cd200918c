// Package replicas holds end-to-end tests of several keybrake proxy replicas
// sharing one PostgreSQL database: the cap held to the cent under concurrency
// across replicas, policy changes applied on every replica, recovery of
// requests interrupted by SIGKILL, and a store that goes down and comes back.
// It has no code of its own; see the _test.go files.
package replicas
