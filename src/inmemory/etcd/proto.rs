//! The few etcd v3 API messages the fake etcd serves, derived with prost by hand rather than
//! generated from etcd's `rpc.proto`: no protoc in the build, and only these five calls are
//! served. Field numbers and types follow package `etcdserverpb` of etcd v3.6 (the client KCP
//! v1.14 links); fields the fake never fills are left out, which protobuf reads as absent.
//! Field names follow Rust style; protobuf only sees the numbers.

#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(string, tag = "2")]
    pub version: String,
    #[prost(int64, tag = "3")]
    pub db_size: i64,
    #[prost(uint64, tag = "4")]
    pub leader: u64,
    #[prost(uint64, tag = "5")]
    pub raft_index: u64,
    #[prost(uint64, tag = "6")]
    pub raft_term: u64,
    #[prost(uint64, tag = "7")]
    pub raft_applied_index: u64,
    #[prost(string, repeated, tag = "8")]
    pub errors: Vec<String>,
    #[prost(int64, tag = "9")]
    pub db_size_in_use: i64,
    #[prost(bool, tag = "10")]
    pub is_learner: bool,
    #[prost(string, tag = "11")]
    pub storage_version: String,
    #[prost(int64, tag = "12")]
    pub db_size_quota: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberListRequest {
    #[prost(bool, tag = "1")]
    pub linearizable: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Member {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(string, repeated, tag = "3")]
    pub peer_urls: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub client_urls: Vec<String>,
    #[prost(bool, tag = "5")]
    pub is_learner: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberListResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub members: Vec<Member>,
}

/// `AlarmRequest.AlarmAction`: GET = 0, ACTIVATE = 1, DEACTIVATE = 2.
pub const ALARM_GET: i32 = 0;

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlarmRequest {
    #[prost(int32, tag = "1")]
    pub action: i32,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    #[prost(int32, tag = "3")]
    pub alarm: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlarmMember {
    #[prost(uint64, tag = "1")]
    pub member_id: u64,
    #[prost(int32, tag = "2")]
    pub alarm: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct AlarmResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub alarms: Vec<AlarmMember>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MoveLeaderRequest {
    #[prost(uint64, tag = "1")]
    pub target_id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MoveLeaderResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberRemoveRequest {
    #[prost(uint64, tag = "1")]
    pub id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct MemberRemoveResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub members: Vec<Member>,
}
