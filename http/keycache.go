package http

import (
	"context"
	"sync"

	"github.com/keybrake/keybrake"
)

// keyCacheSize bounds the cache; past it, the cache is emptied and refilled.
const keyCacheSize = 10_000

// keyCache keeps vault keys by secret hash so that authenticating a request
// costs no store read. It is only used with a store that implements
// keybrake.KeyWatcher, and every change reported evicts the key, so a
// revocation or cap change applies on the next request. Money-moving
// requests never rely on it alone: Reserve reads the key's policy again
// inside its transaction.
type keyCache struct {
	mu     sync.Mutex
	gen    uint64 // bumped by every change, so a lookup racing a change is not cached
	byHash map[string]*keybrake.Key
	// hashOf maps a key ID to every hash it is cached under: during a
	// rotation's grace period a key is cached under its old secret and its
	// new one, and a change must evict both.
	hashOf map[string][]string
}

func newKeyCache() *keyCache {
	return &keyCache{byHash: map[string]*keybrake.Key{}, hashOf: map[string][]string{}}
}

func (c *keyCache) get(hash string) (*keybrake.Key, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byHash[hash], c.gen
}

// put caches k unless a change was reported since gen was read.
func (c *keyCache) put(hash string, k *keybrake.Key, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return
	}
	if len(c.byHash) >= keyCacheSize {
		c.byHash, c.hashOf = map[string]*keybrake.Key{}, map[string][]string{}
	}
	if _, ok := c.byHash[hash]; !ok {
		c.hashOf[k.ID] = append(c.hashOf[k.ID], hash)
	}
	c.byHash[hash] = k
}

// evict drops a key, or every key for id "".
func (c *keyCache) evict(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if id == "" {
		c.byHash, c.hashOf = map[string]*keybrake.Key{}, map[string][]string{}
		return
	}
	for _, h := range c.hashOf[id] {
		delete(c.byHash, h)
	}
	delete(c.hashOf, id)
}

// findKey returns the key whose vault key hashes to hash, from the cache
// when the store reports changes, else from the store.
func (s *Server) findKey(ctx context.Context, hash string) (*keybrake.Key, error) {
	if s.keys == nil {
		return s.Store.FindKeyBySecretHash(ctx, hash)
	}
	k, gen := s.keys.get(hash)
	if k != nil {
		return k, nil
	}
	k, err := s.Store.FindKeyBySecretHash(ctx, hash)
	if err != nil {
		return nil, err
	}
	s.keys.put(hash, k, gen)
	return k, nil
}

// watchKeys starts the cache if the store can report changes.
func (s *Server) watchKeys() error {
	w, ok := s.Store.(keybrake.KeyWatcher)
	if !ok {
		return nil
	}
	cache := newKeyCache()
	ctx, cancel := context.WithCancel(context.Background())
	if err := w.WatchKeys(ctx, cache.evict); err != nil {
		cancel()
		return err
	}
	s.keys, s.stopWatch = cache, cancel
	return nil
}

// evictKey drops a key this server changed, without waiting for the
// store's report.
func (s *Server) evictKey(id string) {
	if s.keys != nil {
		s.keys.evict(id)
	}
}
