package ethtool

// Feature is the state of one device feature.
type Feature struct {
	Active     bool // on now
	Requested  bool // wanted by the user, whether or not the device grants it
	Changeable bool // can be switched on this device; false means fixed
}
