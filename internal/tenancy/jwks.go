package tenancy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
)

// maxJWKSKeys bounds a key set: a set is the keys in rotation, a handful.
const maxJWKSKeys = 64

// setKey is one verification key of a JWKS, selected by the token's kid.
type setKey struct {
	key any    // []byte, *rsa.PublicKey or *ecdsa.PublicKey
	alg string // the JWK's alg, when it names one: the only one it verifies
}

// jwk is the JSON of one key (RFC 7517 §4, RFC 7518 §6).
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	K   string `json:"k"`   // oct
	N   string `json:"n"`   // RSA
	E   string `json:"e"`   // RSA
	Crv string `json:"crv"` // EC
	X   string `json:"x"`   // EC
	Y   string `json:"y"`   // EC
	D   string `json:"d"`   // a private part: refused (see parseKeySet)
}

// curves are the JWK names of the ECDSA curves jwtAlgs allows.
var curves = map[string]elliptic.Curve{"P-256": elliptic.P256(), "P-384": elliptic.P384(), "P-521": elliptic.P521()}

// parseKeySet reads a JWKS ({"keys": [...]}) into keys by kid, each checked
// as a single key is: of the family of algs, HMAC secrets long enough, RSA
// of 2048 bits or more, ECDSA on the curve of every listed algorithm. Every
// key needs a kid, unique in the set, and when it has a use it is "sig".
// An asymmetric key with its private part ("d") is refused: the file is
// meant to hold public keys, and a leaked signing key is worse than a
// refused boot.
func parseKeySet(raw []byte, family keyFamily, algs []string) (map[string]setKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, configErr("JWT.KeySet", "not a JWKS document: %v", err)
	}
	if len(set.Keys) == 0 || len(set.Keys) > maxJWKSKeys {
		return nil, configErr("JWT.KeySet", "holds %d keys, want 1 to %d", len(set.Keys), maxJWKSKeys)
	}
	keys := make(map[string]setKey, len(set.Keys))
	for i, k := range set.Keys {
		field := fmt.Sprintf("JWT.KeySet.keys[%d]", i)
		switch {
		case k.Kid == "":
			return nil, configErr(field, "has no kid; every key of a set needs one, tokens select keys by it")
		case len(k.Kid) > 256:
			return nil, configErr(field, "kid is longer than 256 bytes")
		case keys[k.Kid].key != nil:
			return nil, configErr(field, "kid %q appears twice", k.Kid)
		case k.Use != "" && k.Use != "sig":
			return nil, configErr(field, "use is %q; a verification key has use \"sig\"", k.Use)
		case k.Alg != "" && !slices.Contains(algs, k.Alg):
			return nil, configErr(field, "alg %s is not one of the allowed algorithms %v", k.Alg, algs)
		case k.D != "" && k.Kty != "oct":
			return nil, configErr(field, "holds a private key (\"d\"); the set needs the public keys only")
		}
		key, err := k.public(family, algs)
		if err != nil {
			return nil, configErr(field, "%v", err)
		}
		keys[k.Kid] = setKey{key: key, alg: k.Alg}
	}
	return keys, nil
}

// public decodes the key, checked against the family and algorithms.
func (k jwk) public(family keyFamily, algs []string) (any, error) {
	want := map[keyFamily]string{familyHMAC: "oct", familyRSA: "RSA", familyECDSA: "EC"}[family]
	if k.Kty != want {
		return nil, fmt.Errorf("kty is %q; the allowed algorithms %v need %q keys", k.Kty, algs, want)
	}
	switch family {
	case familyHMAC:
		secret, err := jwkBytes(k.K, "k")
		if err != nil {
			return nil, err
		}
		for _, alg := range algs {
			if n := jwtAlgs[alg].hmacKey; len(secret) < n && (k.Alg == "" || k.Alg == alg) {
				return nil, fmt.Errorf("%s needs a key of at least %d bytes, got %d", alg, n, len(secret))
			}
		}
		return secret, nil
	case familyRSA:
		n, err := jwkBytes(k.N, "n")
		if err != nil {
			return nil, err
		}
		e, err := jwkBytes(k.E, "e")
		if err != nil {
			return nil, err
		}
		if len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("e must be 1 to 4 bytes, got %d", len(e))
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}
		if pub.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA key has %d bits, want at least %d", pub.N.BitLen(), minRSABits)
		}
		if pub.E < 3 || pub.E%2 == 0 {
			return nil, fmt.Errorf("RSA exponent %d is not an odd number of 3 or more", pub.E)
		}
		return pub, nil
	default:
		curve, ok := curves[k.Crv]
		if !ok {
			return nil, fmt.Errorf("crv %q is not P-256, P-384 or P-521", k.Crv)
		}
		for _, alg := range algs {
			if jwtAlgs[alg].curve != curve && (k.Alg == "" || k.Alg == alg) {
				return nil, fmt.Errorf("%s needs curve %s, key is on %s", alg, jwtAlgs[alg].curve.Params().Name, k.Crv)
			}
		}
		x, err := jwkBytes(k.X, "x")
		if err != nil {
			return nil, err
		}
		y, err := jwkBytes(k.Y, "y")
		if err != nil {
			return nil, err
		}
		// The uncompressed point 0x04 || X || Y, each coordinate padded to
		// the curve's size; parsing it checks that the point is on the curve.
		size := (curve.Params().BitSize + 7) / 8
		if len(x) > size || len(y) > size {
			return nil, fmt.Errorf("x or y is longer than %d bytes for %s", size, k.Crv)
		}
		point := make([]byte, 1+2*size)
		point[0] = 4
		copy(point[1+size-len(x):1+size], x)
		copy(point[1+2*size-len(y):], y)
		pub, err := ecdsa.ParseUncompressedPublicKey(curve, point)
		if err != nil {
			return nil, fmt.Errorf("not a point on %s: %v", k.Crv, err)
		}
		return pub, nil
	}
}

// jwkBytes decodes a JWK member (base64url without padding, RFC 7515 §2).
func jwkBytes(s, member string) ([]byte, error) {
	if s == "" {
		return nil, fmt.Errorf("%s is missing", member)
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%s is not base64url: %v", member, err)
	}
	return b, nil
}
