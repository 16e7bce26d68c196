# The model sources of stoke_worker_engine (one file per architecture).
set(STOKE_MODEL_SOURCES
  models/cnn.cc
  models/gpt.cc
  models/mlp.cc
  models/model_factory.cc
  models/resnet.cc
  models/torchscript_model.cc
)
