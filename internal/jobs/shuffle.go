package jobs

import (
	"fmt"
	"math/bits"
)

// MaxLanes is the largest lane count ShuffleShard accepts. It keeps every
// binomial coefficient C(n, k) within a uint64 (C(64, 32) ≈ 1.8e18) and the
// lane label of the metrics bounded.
const MaxLanes = 64

// binom holds Pascal's triangle up to MaxLanes, so ranking and unranking a
// combination never multiplies or divides.
var binom = func() (t [MaxLanes + 1][MaxLanes + 1]uint64) {
	for n := 0; n <= MaxLanes; n++ {
		t[n][0] = 1
		for k := 1; k <= n; k++ {
			t[n][k] = t[n-1][k-1] + t[n-1][k]
		}
	}
	return t
}()

// Combinations returns C(n, k), the number of distinct lane sets ShuffleShard
// can return for n lanes and k lanes per key. It panics on the arguments
// ShuffleShard rejects.
func Combinations(n, k int) uint64 {
	checkShard(n, k)
	return binom[n][k]
}

// ShuffleShard returns the k distinct lanes, in ascending order, out of lanes
// 0..n-1 that serve key. The mapping is part of the public contract (golden
// vectors in the tests pin it), so any code, in any language, can compute the
// same assignment:
//
//  1. h = FNV-1a 64-bit of the key's bytes (offset basis 0xcbf29ce484222325,
//     prime 0x100000001b3);
//  2. h is mixed with the SplitMix64 finalizer:
//     h ^= h>>30; h *= 0xbf58476d1ce4e5b9; h ^= h>>27; h *= 0x94d049bb133111eb; h ^= h>>31
//     (without it the high bits of FNV-1a barely move between keys that
//     differ in their last bytes, and step 3 reads the high bits);
//  3. rank = floor(h × C(n, k) / 2^64), a multiply-high that maps the hash onto
//     0..C(n, k)-1 with a bias below C(n, k)/2^64;
//  4. the result is the rank-th k-subset of {0, …, n-1} in lexicographic order
//     of the ascending subsets (rank 0 is {0, 1, …, k-1}).
//
// So every one of the C(n, k) combinations is equally likely: with 8 lanes and
// 2 per key there are 28 pairs and two keys share their pair with probability
// 1/28. It panics unless 1 ≤ k ≤ n ≤ MaxLanes, like an index out of range: the
// runtime validates lanes before it calls this.
func ShuffleShard(key string, n, k int) []int {
	return AppendShuffleShard(make([]int, 0, k), key, n, k)
}

// AppendShuffleShard is ShuffleShard appending to dst, for callers that reuse a
// buffer.
func AppendShuffleShard(dst []int, key string, n, k int) []int {
	checkShard(n, k)
	rank, _ := bits.Mul64(shardHash(key), binom[n][k])
	return appendUnrank(dst, rank, n, k)
}

func checkShard(n, k int) {
	if n < 1 || n > MaxLanes || k < 1 || k > n {
		panic(fmt.Sprintf("jobs: ShuffleShard needs 1 <= k <= n <= %d, got n=%d k=%d", MaxLanes, n, k))
	}
}

// shardHash is steps 1 and 2 of ShuffleShard.
func shardHash(key string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 0x100000001b3
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// appendUnrank appends the rank-th k-subset of {0..n-1} in lexicographic
// order. At each position it skips candidate x while the subsets that start
// with x (C(n-x-1, remaining-1) of them) all rank below rank.
func appendUnrank(dst []int, rank uint64, n, k int) []int {
	x := 0
	for i := 0; i < k; i++ {
		for {
			c := binom[n-x-1][k-i-1]
			if rank < c {
				dst = append(dst, x)
				x++
				break
			}
			rank -= c
			x++
		}
	}
	return dst
}
