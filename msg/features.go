package msg

// Ceph feature bits (CEPH_FEATURE_* in src/include/ceph_features.h) that
// ferry looks at. Wire constants; append only.
const (
	FeatureMsgAuth        uint64 = 1 << 23 // footer carries a signature
	FeatureServerNautilus uint64 = 1 << 21 // shares its bit with an older, retired feature
	FeatureMsgAddr2       uint64 = 1 << 59 // entity_addr_t in the versioned form
)

// FeaturesAll is the feature mask a Ceph 16.2 (Pacific) daemon advertises
// (observed on the wire from ceph-mon 16.2.15). ferry advertises it so that
// Pacific daemons accept it: a mon requires the CRUSH bits in it as well as
// MSG_ADDR2.
const FeaturesAll uint64 = 0x3f01cfbdfffdffff

// FeaturesMonRequired is the mask a Pacific mon requires of its clients
// (observed: SERVER_IDENT's required field).
const FeaturesMonRequired uint64 = 0x0c01020002040000
