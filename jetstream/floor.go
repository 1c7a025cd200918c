package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	jsapi "github.com/nats-io/nats.go/jetstream"
)

// DefaultFloorBucket is the JetStream KV bucket of KVFloors.
const DefaultFloorBucket = "keybrake_ack_floors"

// ErrNoFloor is returned by FloorStore.LoadFloor when no floor is recorded.
var ErrNoFloor = errors.New("no ack floor recorded")

// Floor is the recorded ack floor of a durable: every message of the stream
// up to StreamSeq was acknowledged (or terminated, or gave up on), so a
// recreated durable resumes at StreamSeq+1 without replaying them.
type Floor struct {
	StreamSeq uint64 `json:"stream_seq"`
	// StreamCreated is when the stream was created. A floor of another
	// incarnation of the stream (deleted and created again, sequences
	// restarted at 1) is never used.
	StreamCreated time.Time `json:"stream_created"`
	UpdatedAt     time.Time `json:"updated_at"`
}

// FloorStore records the ack floors of durables, outside the consumers, so
// they survive a deleted durable.
type FloorStore interface {
	// LoadFloor returns the floor of stream's durable. Returns ErrNoFloor
	// if none is recorded.
	LoadFloor(ctx context.Context, stream, durable string) (Floor, error)
	// SaveFloor records f if it is ahead of the recorded floor (or of
	// another stream incarnation); a floor never moves back, whatever the
	// order in which concurrent workers save.
	SaveFloor(ctx context.Context, stream, durable string, f Floor) error
}

// KVFloors is a FloorStore in a JetStream key-value bucket, one key
// "<stream>.<durable>" per durable, holding a JSON Floor. It lives next to
// the stream, on the same servers and with the same replication, and
// survives `nats consumer rm`; delete the key (`nats kv del
// keybrake_ack_floors STREAM.DURABLE`) to let an explicit StartPolicy apply.
type KVFloors struct {
	JS     jsapi.JetStream
	Bucket string // DefaultFloorBucket if ""
	// Replicas of the bucket when KVFloors creates it; 1 if 0.
	Replicas int
}

var _ FloorStore = (*KVFloors)(nil)

func (k *KVFloors) bucket(ctx context.Context) (jsapi.KeyValue, error) {
	name := k.Bucket
	if name == "" {
		name = DefaultFloorBucket
	}
	kv, err := k.JS.KeyValue(ctx, name)
	if errors.Is(err, jsapi.ErrBucketNotFound) {
		kv, err = k.JS.CreateKeyValue(ctx, jsapi.KeyValueConfig{
			Bucket:      name,
			Description: "keybrake: ack floors of billing durables, to resume a recreated durable without replaying history",
			History:     5,
			Replicas:    max(k.Replicas, 1),
		})
		if errors.Is(err, jsapi.ErrBucketExists) {
			kv, err = k.JS.KeyValue(ctx, name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("ack floor bucket %s: %w", name, err)
	}
	return kv, nil
}

func floorKey(stream, durable string) string { return stream + "." + durable }

// LoadFloor implements FloorStore.
func (k *KVFloors) LoadFloor(ctx context.Context, stream, durable string) (Floor, error) {
	kv, err := k.bucket(ctx)
	if err != nil {
		return Floor{}, err
	}
	f, _, err := loadFloor(ctx, kv, floorKey(stream, durable))
	return f, err
}

func loadFloor(ctx context.Context, kv jsapi.KeyValue, key string) (Floor, uint64, error) {
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jsapi.ErrKeyNotFound) {
		return Floor{}, 0, ErrNoFloor
	}
	if err != nil {
		return Floor{}, 0, fmt.Errorf("load ack floor %s: %w", key, err)
	}
	var f Floor
	if err := json.Unmarshal(e.Value(), &f); err != nil {
		return Floor{}, 0, fmt.Errorf("load ack floor %s: %w", key, err)
	}
	return f, e.Revision(), nil
}

// SaveFloor implements FloorStore with compare-and-set on the key's
// revision.
func (k *KVFloors) SaveFloor(ctx context.Context, stream, durable string, f Floor) error {
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	key := floorKey(stream, durable)
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	for range 10 {
		cur, rev, err := loadFloor(ctx, kv, key)
		switch {
		case errors.Is(err, ErrNoFloor):
			_, err = kv.Create(ctx, key, b)
		case err != nil:
			return err
		case cur.StreamCreated.Equal(f.StreamCreated) && cur.StreamSeq >= f.StreamSeq:
			return nil
		default:
			_, err = kv.Update(ctx, key, b, rev)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, jsapi.ErrKeyExists) && !errors.Is(err, jsapi.ErrKeyRevisionMismatch) {
			return fmt.Errorf("save ack floor %s: %w", key, err)
		}
	}
	return fmt.Errorf("save ack floor %s: too many concurrent updates", key)
}
