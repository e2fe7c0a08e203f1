"""Rigid-body transformations (frames) T = (R, t): x_global = R x_local + t, lengths in Å.

Jumper et al. 2021, Suppl. 1.1 ("frames"), Alg. 21 (frames from three points), Alg. 23 (backbone
update from a non-unit quaternion). Rotations are stored as matrices ``[*, 3, 3]``; translations as
``[*, 3]``. Every op is batched over arbitrary leading dims and differentiable.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def quat_to_rot(quat: Tensor) -> Tensor:
    """Unit quaternion (w, x, y, z) ``[*, 4]`` to rotation matrix ``[*, 3, 3]``.

    The input is normalised first, so any non-zero quaternion is accepted.
    """
    q = quat / torch.linalg.vector_norm(quat, dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rows = [
        1 - 2 * (y * y + z * z),
        2 * (x * y - w * z),
        2 * (x * z + w * y),
        2 * (x * y + w * z),
        1 - 2 * (x * x + z * z),
        2 * (y * z - w * x),
        2 * (x * z - w * y),
        2 * (y * z + w * x),
        1 - 2 * (x * x + y * y),
    ]
    return torch.stack(rows, dim=-1).reshape(q.shape[:-1] + (3, 3))  # [*, 3, 3]


def rot_to_quat(rot: Tensor) -> Tensor:
    """Rotation matrix ``[*, 3, 3]`` to unit quaternion (w, x, y, z) ``[*, 4]`` with w >= 0.

    Uses the eigenvector of the symmetric 4x4 matrix (Bar-Itzhack), which is stable for all angles.
    """
    r = rot
    xx, xy, xz = r[..., 0, 0], r[..., 0, 1], r[..., 0, 2]
    yx, yy, yz = r[..., 1, 0], r[..., 1, 1], r[..., 1, 2]
    zx, zy, zz = r[..., 2, 0], r[..., 2, 1], r[..., 2, 2]
    k = (
        torch.stack(
            [
                torch.stack([xx + yy + zz, zy - yz, xz - zx, yx - xy], -1),
                torch.stack([zy - yz, xx - yy - zz, xy + yx, xz + zx], -1),
                torch.stack([xz - zx, xy + yx, yy - xx - zz, yz + zy], -1),
                torch.stack([yx - xy, xz + zx, yz + zy, zz - xx - yy], -1),
            ],
            -2,
        )
        / 3.0
    )  # [*, 4, 4]
    _, vecs = torch.linalg.eigh(k)
    q = vecs[..., -1]  # [*, 4] eigenvector of the largest eigenvalue
    return q * torch.where(q[..., :1] < 0, -1.0, 1.0)


@dataclass(frozen=True)
class Rigid:
    """A batch of rigid transforms.

    Attributes:
        rots: rotation matrices ``[*, 3, 3]``.
        trans: translations ``[*, 3]`` in Å.
    """

    rots: Tensor
    trans: Tensor

    # construction -------------------------------------------------------------------------
    @staticmethod
    def identity(shape: tuple[int, ...], dtype=torch.float32, device=None) -> "Rigid":
        """Identity frames of batch shape ``shape``."""
        rots = torch.eye(3, dtype=dtype, device=device).expand(*shape, 3, 3).clone()
        return Rigid(rots, torch.zeros(*shape, 3, dtype=dtype, device=device))

    @staticmethod
    def from_tensor_4x4(t: Tensor) -> "Rigid":
        """From homogeneous matrices ``[*, 4, 4]``."""
        return Rigid(t[..., :3, :3], t[..., :3, 3])

    def to_tensor_4x4(self) -> Tensor:
        """Homogeneous matrices ``[*, 4, 4]``."""
        out = self.rots.new_zeros(self.shape + (4, 4))
        out[..., :3, :3] = self.rots
        out[..., :3, 3] = self.trans
        out[..., 3, 3] = 1.0
        return out

    @staticmethod
    def from_tensor_7(t: Tensor) -> "Rigid":
        """From ``[*, 7]`` = quaternion (w, x, y, z; normalised here) + translation (Å)."""
        return Rigid(quat_to_rot(t[..., :4]), t[..., 4:])

    def to_tensor_7(self) -> Tensor:
        """``[*, 7]`` = unit quaternion (w >= 0) + translation (Å)."""
        return torch.cat([rot_to_quat(self.rots), self.trans], dim=-1)

    @staticmethod
    def from_3_points(x1: Tensor, x2: Tensor, x3: Tensor, eps: float = 1e-8) -> "Rigid":
        """Frames from three points by Gram-Schmidt (Suppl. Alg. 21).

        Args:
            x1, x2, x3: ``[*, 3]`` (for backbone frames: N, CA, C). ``x2`` becomes the origin, the
                x-axis points from x2 towards x3, and x1 lies in the xy-plane.
            eps: added under the square roots.
        """
        v1 = x3 - x2
        v2 = x1 - x2
        e1 = v1 / torch.sqrt((v1 * v1).sum(-1, keepdim=True) + eps)
        u2 = v2 - e1 * (e1 * v2).sum(-1, keepdim=True)
        e2 = u2 / torch.sqrt((u2 * u2).sum(-1, keepdim=True) + eps)
        e3 = torch.cross(e1, e2, dim=-1)
        rots = torch.stack([e1, e2, e3], dim=-1)  # columns are the axes: [*, 3, 3]
        return Rigid(rots, x2)

    # properties ----------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.trans.shape[:-1])

    @property
    def dtype(self):
        return self.trans.dtype

    @property
    def device(self):
        return self.trans.device

    # algebra -------------------------------------------------------------------------------
    def compose(self, other: "Rigid") -> "Rigid":
        """``self ∘ other``: apply ``other`` first, then ``self``."""
        rots = self.rots @ other.rots
        trans = (self.rots @ other.trans.unsqueeze(-1)).squeeze(-1) + self.trans
        return Rigid(rots, trans)

    def invert(self) -> "Rigid":
        rot_t = self.rots.transpose(-1, -2)
        return Rigid(rot_t, -(rot_t @ self.trans.unsqueeze(-1)).squeeze(-1))

    def apply(self, pts: Tensor) -> Tensor:
        """Local -> global for points ``[*, 3]`` broadcastable with the frame shape."""
        return torch.einsum("...ij,...j->...i", self.rots, pts) + self.trans

    def invert_apply(self, pts: Tensor) -> Tensor:
        """Global -> local for points ``[*, 3]``."""
        return torch.einsum("...ji,...j->...i", self.rots, pts - self.trans)

    def apply_rot(self, vec: Tensor) -> Tensor:
        return torch.einsum("...ij,...j->...i", self.rots, vec)

    def compose_q_update_vec(self, update: Tensor) -> "Rigid":
        """Compose with a backbone update ``[*, 6]`` = (b, c, d, t_x, t_y, t_z) (Suppl. Alg. 23).

        The update rotation is the normalised quaternion (1, b, c, d); the update translation is in
        the local frame. Returns ``self ∘ update``.
        """
        bcd, t = update[..., :3], update[..., 3:]
        quat = torch.cat([torch.ones_like(bcd[..., :1]), bcd], dim=-1)
        return self.compose(Rigid(quat_to_rot(quat), t))

    # tensor-like helpers -------------------------------------------------------------------
    def __getitem__(self, idx) -> "Rigid":
        if not isinstance(idx, tuple):
            idx = (idx,)
        return Rigid(self.rots[idx + (slice(None), slice(None))], self.trans[idx + (slice(None),)])

    def unsqueeze(self, dim: int) -> "Rigid":
        """Insert a batch dim (``dim`` counts over the batch dims only)."""
        d = dim if dim >= 0 else len(self.shape) + 1 + dim
        return Rigid(self.rots.unsqueeze(d), self.trans.unsqueeze(d))

    def scale_translation(self, factor: float) -> "Rigid":
        return Rigid(self.rots, self.trans * factor)

    def stop_rot_gradient(self) -> "Rigid":
        """Detach the rotations (AF2 stops rotation gradients between structure-module layers)."""
        return Rigid(self.rots.detach(), self.trans)

    def detach(self) -> "Rigid":
        return Rigid(self.rots.detach(), self.trans.detach())

    def to(self, dtype=None, device=None) -> "Rigid":
        return Rigid(self.rots.to(device=device, dtype=dtype), self.trans.to(device=device, dtype=dtype))

    @staticmethod
    def cat(rigids: list["Rigid"], dim: int) -> "Rigid":
        d = dim if dim >= 0 else len(rigids[0].shape) + dim
        return Rigid(torch.cat([r.rots for r in rigids], d), torch.cat([r.trans for r in rigids], d))

    @staticmethod
    def stack(rigids: list["Rigid"], dim: int) -> "Rigid":
        d = dim if dim >= 0 else len(rigids[0].shape) + 1 + dim
        return Rigid(torch.stack([r.rots for r in rigids], d), torch.stack([r.trans for r in rigids], d))
