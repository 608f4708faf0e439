"""What a sentiment task gives without ALBERT: the majority label, and TF-IDF + logistic regression."""

import collections
import re

import numpy as np


def majority(train, test):
    """Test accuracy of always answering the most common training label."""
    labels = [label for _, label in train]
    most = max(set(labels), key=labels.count)
    return float(np.mean([label == most for _, label in test]))


def _words(text):
    words = re.findall(r"[a-z0-9']+", text.lower())
    return words + [a + " " + b for a, b in zip(words, words[1:])]


def tfidf_features(train_texts, *other_texts):
    """L2-normalized TF-IDF rows (SciPy CSR) of words and word pairs seen in at least 2 training texts:
    the training texts' matrix, then one per list in `other_texts`."""
    from scipy import sparse

    counts = collections.Counter(w for text in train_texts for w in set(_words(text)))
    vocab = {w: i for i, w in enumerate(w for w, c in counts.items() if c >= 2)}
    idf = np.log((1 + len(train_texts)) / (1 + np.array([counts[w] for w in vocab], np.float64))) + 1

    def features(texts):
        data, indices, indptr = [], [], [0]
        for text in texts:
            row = collections.Counter(vocab[w] for w in _words(text) if w in vocab)
            values = np.array([c * idf[i] for i, c in row.items()])
            data.extend(values / max(np.linalg.norm(values), 1e-12) if len(values) else [])
            indices.extend(row)
            indptr.append(len(indices))
        return sparse.csr_matrix((data, indices, indptr), shape=(len(texts), len(vocab)))

    return [features(texts) for texts in (train_texts, *other_texts)]


def tfidf_logistic_regression(train, test, c=10.0):
    """Test accuracy of TF-IDF + L2 logistic regression.

    scikit-learn's formulation (sum of log losses * c + ||w||^2 / 2), solved
    with SciPy's L-BFGS; rows are L2-normalized TF-IDF vectors.
    """
    train_x, test_x = tfidf_features([text for text, _ in train], [text for text, _ in test])
    test_y = np.array([label for _, label in test])
    return logistic_regression_accuracy(train_x, np.array([label for _, label in train]), test_x, test_y, c)


def fit_logistic_regression(x, y, c):
    """(w, b) of L2 logistic regression (sum of log losses * c + ||w||^2 / 2) fit with L-BFGS.

    x: (n, d) features, dense or SciPy sparse; y: 0/1 labels.
    """
    from scipy import optimize

    sign = 2 * np.asarray(y, np.float64) - 1

    def loss_and_gradient(theta):
        w, b = theta[:-1], theta[-1]
        margin = sign * (x @ w + b)
        loss = c * np.sum(np.logaddexp(0, -margin)) + 0.5 * w @ w
        d_margin = -c * sign / (1 + np.exp(margin))
        return loss, np.concatenate([x.T @ d_margin + w, [d_margin.sum()]])

    theta = optimize.minimize(loss_and_gradient, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B").x
    return theta[:-1], theta[-1]


def logistic_regression_accuracy(x, y, test_x, test_y, c):
    """Test accuracy of `fit_logistic_regression` on (x, y), on (test_x, test_y)."""
    w, b = fit_logistic_regression(x, y, c)
    return float(np.mean(((test_x @ w + b) > 0) == np.asarray(test_y)))
