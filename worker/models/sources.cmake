# The model sources of stoke_worker_engine (one file per architecture).
set(STOKE_MODEL_SOURCES
  models/cnn.cc
  models/mlp.cc
  models/model_factory.cc
)
