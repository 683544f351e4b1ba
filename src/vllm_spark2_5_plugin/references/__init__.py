# SPDX-License-Identifier: Apache-2.0
"""Pure-PyTorch references: Spark2_5 (docs/model.md), DSpark (docs/dspark.md)."""
