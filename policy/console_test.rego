package cellgate.policy_test

test_console_defaults_quiet if {
	c := cfg([])
	count(deny_of(c)) == 0
	count(warn_of(c)) == 0
}

test_console_trusting_everyone_warned if {
	c := cfg([rep("/console/trusted_proxies", ["10.0.0.0/8", "0.0.0.0/0"])])
	"console.trusted_proxies: \"0.0.0.0/0\" trusts every peer, so any client sets the address the consoles audit and throttle; list only your proxies' addresses" in warn_of(c)
	count(deny_of(c)) == 0
}

test_console_own_proxies_quiet if {
	c := cfg([rep("/console/trusted_proxies", ["10.0.0.0/8", "192.0.2.7"])])
	count(warn_of(c)) == 0
}
