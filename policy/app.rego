package cellgate.policy

# The service's own rules live in policy/app/ (package cellgate.app, the
# service's files): their deny and warn sets are the template's too, so
# every evaluator of this package (generate, server check, boot, conftest)
# applies them. No rule there: nothing is added.

deny contains msg if {
	some msg in data.cellgate.app.deny
}

warn contains msg if {
	some msg in data.cellgate.app.warn
}
