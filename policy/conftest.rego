# Package main is conftest's default namespace: these rules hand the
# cellgate policy's deny and warn sets to `conftest test --policy policy/
# <exported config>` with no --namespace flag. The server and the generator
# evaluate data.cellgate.policy directly and never read this package.
package main

import data.cellgate.policy

deny contains msg if {
	some msg in policy.deny
}

warn contains msg if {
	some msg in policy.warn
}
