package deploytest

import (
	"net/url"
	"strconv"
)

// portOf is a URL's port, the scheme's default when it names none.
func portOf(raw string) (int, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return 0, err
	}
	p := u.Port()
	if p == "" {
		p = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return strconv.Atoi(p)
}
