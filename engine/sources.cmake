# Every source file of the engine, named once, by the target it belongs to (no file(GLOB): a file
# is part of the build because it is listed here). engine/CMakeLists.txt builds the targets from
# these lists; the checking trees compile the same files with their sanitizers (tests/fuzz,
# tests/tsan, tests/sanitize). Each list holds absolute paths.
set(meridian_core_sources
  # The seams and the error types.
  error.cc error.h inner_worker.h runtime.h store.h transport.h
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
set(meridian_runtime_thread_sources runtime/thread_runtime.cc runtime/thread_runtime.h)
set(meridian_inproc_sources transport/inproc/inproc_transport.cc transport/inproc/inproc_transport.h
  store/memory_store.cc store/memory_store.h
  transport/deadline.h)  # the transports' shared deadline arithmetic (header only)
set(meridian_store_tcp_sources store/tcp_store.h store/tcp_store_client.cc
  store/tcp_store_server.cc store/tcp_store_wire.cc store/tcp_store_wire.h)
set(meridian_faults_sources fault/faulty_transport.cc fault/faulty_transport.h
  fault/cuttable_store.cc fault/cuttable_store.h fault/fault_point.cc fault/fault_point.h
  fault/watched_transport.h)
set(meridian_event_sinks_sources events/sinks/sinks.cc events/sinks/sinks.h)
set(meridian_config_sources config/reader.cc config/reader.h config/run_file.cc config/run_file.h)
set(meridian_store_etcd_sources store/etcd/etcd_store.cc store/etcd/etcd_store.h
  store/etcd/etcd_wire.cc store/etcd/etcd_wire.h)
set(meridian_gloo_sources transport/gloo/gloo_transport.cc transport/gloo/gloo_transport.h
  transport/gloo/gloo_store_adapter.cc transport/gloo/gloo_store_adapter.h)
set(meridian_nccl_sources transport/nccl/nccl_transport.cc transport/nccl/nccl_transport.h)

# The targets every build has (meridian_engine), in link order.
set(MERIDIAN_ENGINE_TARGETS meridian_core meridian_runtime_thread meridian_inproc
  meridian_store_tcp meridian_faults meridian_event_sinks meridian_config)
foreach(t IN LISTS MERIDIAN_ENGINE_TARGETS ITEMS meridian_store_etcd meridian_gloo meridian_nccl)
  list(TRANSFORM ${t}_sources PREPEND "${CMAKE_CURRENT_LIST_DIR}/")
endforeach()
