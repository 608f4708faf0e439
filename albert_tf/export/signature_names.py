"""The names an export's signatures and TF-Serving's APIs share, without TensorFlow.

`signatures` builds the functions under these names; the REST codec, the
warmup records and the commands read them before (or without) TensorFlow.
"""

ID_SIGNATURE = "serving_default"
TEXT_SIGNATURE = "serve_text"
TEXT_PAIR_SIGNATURE = "serve_text_pair"
EXAMPLES_SIGNATURE = "serve_examples"
# SignatureDef method names TF-Serving's APIs check (tensorflow/cc/saved_model/signature_constants.h).
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"
# The tf.Example features serve_examples reads, and its input (TF-Serving's kClassifyInputs, kRegressInputs).
TEXT_FEATURE, TEXT_PAIR_FEATURE, EXAMPLES_INPUT = "text", "text_pair", "inputs"
