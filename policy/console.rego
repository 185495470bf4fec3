package cellgate.policy

# The consoles' trusted proxies.

# A trusted proxy's X-Forwarded-For names the client the consoles audit and
# throttle. A range of every address (a /0) trusts every peer, so any
# client chooses the address its wrong tokens are counted against and the
# address the audit names.
warn contains msg if {
	some p in object.get(input, ["console", "trusted_proxies"], [])
	endswith(p, "/0")
	msg := sprintf("console.trusted_proxies: %q trusts every peer, so any client sets the address the consoles audit and throttle; list only your proxies' addresses", [p])
}
