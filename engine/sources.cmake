# Every source file of the engine, named once, by the target it belongs to (no file(GLOB): a file
# is part of the build because it is listed here). Folders are targets: meridian_core is
# engine/core/, meridian_config is engine/config/, and each backend meridian_<name> is
# engine/backends/<name>/; each list below is relative to its target's folder, and becomes
# absolute at the end. engine/CMakeLists.txt builds the targets from these lists; the checking
# trees compile the same files with their sanitizers (tests/fuzz, tests/tsan, tests/sanitize).
set(meridian_core_sources
  # The seams and the error types.
  error.cc error.h inner_worker.h process_probe.h runtime.h store.h transport.h
  codec/codec.cc codec/codec.h codec/codec_isa.h codec/codec_kernels.h
  codec/bf16_codec.cc codec/bf16_codec.h codec/fp32_codec.cc codec/fp32_codec.h
  codec/fp4_codec.cc codec/fp4_codec.h codec/int8_minmax_codec.cc codec/int8_minmax_codec.h
  codec/int8_prime_codec.cc codec/int8_prime_codec.h codec/topk_codec.cc codec/topk_codec.h
  collective/ring_allreduce.cc collective/ring_allreduce.h
  diloco/buckets.cc diloco/buckets.h diloco/data_plan.cc diloco/data_plan.h diloco/diloco.cc diloco/diloco.h
  diloco/outer_optimizer.cc diloco/outer_optimizer.h
  events/config_record.cc events/config_record.h events/event_sink.cc events/event_sink.h events/json.cc events/json.h
  mesh/elastic_mesh.cc mesh/elastic_mesh.h mesh/ring_order.cc mesh/ring_order.h
  mesh/round_record.cc mesh/round_record.h
  recovery/live_recovery.cc recovery/live_recovery.h
  util/base64.cc util/base64.h util/crc32c.cc util/crc32c.h util/epoch_keys.cc util/epoch_keys.h
  util/files.cc util/files.h util/finite.h util/hmac.cc util/hmac.h util/sha256.cc util/sha256.h util/splitmix64.h
  wire/chunk.cc wire/chunk.h
  # The lease bookkeeping every store shares.
  store/lease_table.cc store/lease_table.h)
set(meridian_config_sources reader.cc reader.h run_file.cc run_file.h)
# What the backends share: deadlines on the steady clock; the stores' socket I/O, join
# transcripts and join identity; the process probe over TCP.
set(meridian_common_sources deadline.h socket_process_probe.cc socket_process_probe.h
  store_identity.cc store_identity.h store_net.cc store_net.h)
set(meridian_runtime_thread_sources thread_runtime.cc thread_runtime.h)
set(meridian_inproc_sources inproc_transport.cc inproc_transport.h memory_store.cc memory_store.h)
set(meridian_store_tcp_sources tcp_store.h tcp_store_client.cc tcp_store_server.cc
  tcp_store_wire.cc tcp_store_wire.h)
set(meridian_faults_sources faulty_transport.cc faulty_transport.h cuttable_store.cc
  cuttable_store.h fault_point.cc fault_point.h watched_transport.h)
set(meridian_event_sinks_sources sinks.cc sinks.h)
set(meridian_store_etcd_sources etcd_store.cc etcd_store.h etcd_wire.cc etcd_wire.h)
set(meridian_gloo_sources gloo_transport.cc gloo_transport.h gloo_store_adapter.cc
  gloo_store_adapter.h)
set(meridian_nccl_sources nccl_transport.cc nccl_transport.h)

# The targets every build has (meridian_engine), in link order.
set(MERIDIAN_ENGINE_TARGETS meridian_core meridian_common meridian_runtime_thread meridian_inproc
  meridian_store_tcp meridian_faults meridian_event_sinks meridian_config)
# Every engine target and its folder.
set(MERIDIAN_BACKENDS common runtime_thread inproc store_tcp faults event_sinks store_etcd gloo
  nccl)
list(TRANSFORM meridian_core_sources PREPEND "${CMAKE_CURRENT_LIST_DIR}/core/")
list(TRANSFORM meridian_config_sources PREPEND "${CMAKE_CURRENT_LIST_DIR}/config/")
foreach(b IN LISTS MERIDIAN_BACKENDS)
  list(TRANSFORM meridian_${b}_sources PREPEND "${CMAKE_CURRENT_LIST_DIR}/backends/${b}/")
endforeach()
