//! The geometry MockBlender's model exchange carries: a mesh's vertices and faces in its own
//! space, an object's transform, and the axis conversions glTF and OBJ make (Y-up).

use super::exchange::counts;
use super::scene::MeshCounts;

/// A mesh: vertex positions (32-bit, as Blender stores them) and faces by vertex index.
#[derive(Clone, Debug, PartialEq)]
pub struct Geometry {
    /// Vertex positions.
    pub vertices: Vec<[f32; 3]>,
    /// Faces, each a loop of vertex indices.
    pub faces: Vec<Vec<usize>>,
}

/// An object's location, XYZ Euler rotation and scale.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Transform {
    /// Location.
    pub location: [f32; 3],
    /// XYZ Euler rotation, radians.
    pub rotation: [f32; 3],
    /// Scale.
    pub scale: [f32; 3],
}

impl Transform {
    /// Where the transform puts a point of the object's own space.
    pub fn apply(&self, v: [f32; 3]) -> [f64; 3] {
        let scaled = [0, 1, 2].map(|i| f64::from(v[i]) * f64::from(self.scale[i]));
        let m = euler_matrix(self.rotation.map(f64::from));
        [0, 1, 2]
            .map(|r| (0..3).map(|c| m[r][c] * scaled[c]).sum::<f64>() + f64::from(self.location[r]))
    }

    /// At the origin, unrotated, unscaled.
    pub fn identity() -> Transform {
        Transform {
            location: [0.0; 3],
            rotation: [0.0; 3],
            scale: [1.0; 3],
        }
    }
}

/// Blender's XYZ Euler rotation as a matrix: X first, then Y, then Z (Rz * Ry * Rx).
fn euler_matrix([a, b, c]: [f64; 3]) -> [[f64; 3]; 3] {
    let (sa, ca) = a.sin_cos();
    let (sb, cb) = b.sin_cos();
    let (sc, cc) = c.sin_cos();
    [
        [cb * cc, sa * sb * cc - ca * sc, ca * sb * cc + sa * sc],
        [cb * sc, sa * sb * sc + ca * cc, ca * sb * sc - sa * cc],
        [-sb, sa * cb, ca * cb],
    ]
}

/// The quaternion `[x, y, z, w]` of an XYZ Euler rotation.
pub fn euler_to_quaternion([a, b, c]: [f64; 3]) -> [f64; 4] {
    let (sa, ca) = (a / 2.0).sin_cos();
    let (sb, cb) = (b / 2.0).sin_cos();
    let (sc, cc) = (c / 2.0).sin_cos();
    [
        sa * cb * cc - ca * sb * sc,
        ca * sb * cc + sa * cb * sc,
        ca * cb * sc - sa * sb * cc,
        ca * cb * cc + sa * sb * sc,
    ]
}

/// The XYZ Euler rotation of a quaternion `[x, y, z, w]`.
pub fn quaternion_to_euler([x, y, z, w]: [f64; 4]) -> [f64; 3] {
    let n = (x * x + y * y + z * z + w * w).sqrt();
    let (x, y, z, w) = (x / n, y / n, z / n, w / n);
    let m20 = 2.0 * (x * z - w * y);
    let m21 = 2.0 * (y * z + w * x);
    let m22 = 1.0 - 2.0 * (x * x + y * y);
    let m10 = 2.0 * (x * y + w * z);
    let m00 = 1.0 - 2.0 * (y * y + z * z);
    [
        m21.atan2(m22),
        (-m20).clamp(-1.0, 1.0).asin(),
        m10.atan2(m00),
    ]
}

/// A Z-up vector as Y-up (glTF, OBJ): (x, y, z) -> (x, z, -y).
pub fn to_y_up([x, y, z]: [f64; 3]) -> [f64; 3] {
    [x, z, -y]
}

/// A Y-up vector as Z-up: (x, y, z) -> (x, -z, y).
pub fn from_y_up([x, y, z]: [f64; 3]) -> [f64; 3] {
    [x, -z, y]
}

/// Rounds as the kernel rounds an extent: Python's `round(x, 4)`.
fn round4(x: f64) -> f64 {
    format!("{x:.4}").parse().unwrap_or(x)
}

impl Geometry {
    /// A box `extent` across, centred on the origin (what `mesh.create_cube` makes).
    pub fn cuboid(extent: [f64; 3]) -> Geometry {
        let h = extent.map(|e| (e / 2.0) as f32);
        let vertices = (0..8)
            .map(|i| {
                [0, 1, 2].map(|axis| {
                    if i >> axis & 1 == 1 {
                        h[axis]
                    } else {
                        -h[axis]
                    }
                })
            })
            .collect();
        // Corners by bits (x = 1, y = 2, z = 4); each face a loop around its normal.
        let faces = [
            [0, 2, 3, 1],
            [4, 5, 7, 6],
            [0, 1, 5, 4],
            [2, 6, 7, 3],
            [0, 4, 6, 2],
            [1, 3, 7, 5],
        ]
        .iter()
        .map(|f| f.to_vec())
        .collect();
        Geometry { vertices, faces }
    }

    /// A plane `extent` across in X and Y (what `mesh.create_plane` makes).
    pub fn plane(extent: [f64; 3]) -> Geometry {
        let (x, y) = ((extent[0] / 2.0) as f32, (extent[1] / 2.0) as f32);
        Geometry {
            vertices: vec![[-x, -y, 0.0], [x, -y, 0.0], [x, y, 0.0], [-x, y, 0.0]],
            faces: vec![vec![0, 1, 2, 3]],
        }
    }

    /// Vertices, edges (each distinct pair of neighbours on a face) and faces.
    pub fn counts(&self) -> MeshCounts {
        counts(self.vertices.len(), &self.faces)
    }

    /// The size of the box around the vertices, as the kernel reports it.
    pub fn extent(&self) -> [f64; 3] {
        if self.vertices.is_empty() {
            return [0.0; 3];
        }
        [0, 1, 2].map(|axis| {
            let values = self.vertices.iter().map(|v| f64::from(v[axis]));
            let max = values.clone().fold(f64::MIN, f64::max);
            let min = values.fold(f64::MAX, f64::min);
            round4(max - min)
        })
    }

    /// Each face as a fan of triangles.
    pub fn triangles(&self) -> Vec<[usize; 3]> {
        self.faces
            .iter()
            .flat_map(|f| (1..f.len().saturating_sub(1)).map(move |i| [f[0], f[i], f[i + 1]]))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cube_has_blenders_counts_and_its_extent() {
        let cube = Geometry::cuboid([2.0, 2.0, 2.0]);
        assert_eq!(
            (
                cube.counts().vertices,
                cube.counts().edges,
                cube.counts().polygons
            ),
            (8, 12, 6)
        );
        assert_eq!(cube.extent(), [2.0, 2.0, 2.0]);
        assert_eq!(cube.triangles().len(), 12);
    }

    #[test]
    fn rotations_go_to_quaternions_and_back() {
        // A quarter turn about X, by hand: (sin 45deg, 0, 0, cos 45deg).
        let q = euler_to_quaternion([std::f64::consts::FRAC_PI_2, 0.0, 0.0]);
        let h = std::f64::consts::FRAC_1_SQRT_2;
        assert!(
            q.iter()
                .zip([h, 0.0, 0.0, h])
                .all(|(a, b)| (a - b).abs() < 1e-12)
        );
        let e = [0.3, -0.2, 1.1];
        let back = quaternion_to_euler(euler_to_quaternion(e));
        assert!(back.iter().zip(e).all(|(a, b)| (a - b).abs() < 1e-12));
        // A point one along X turned a quarter about Z lands one along Y.
        let t = Transform {
            location: [0.0; 3],
            rotation: [0.0, 0.0, std::f32::consts::FRAC_PI_2],
            scale: [1.0; 3],
        };
        let p = t.apply([1.0, 0.0, 0.0]);
        assert!((p[0]).abs() < 1e-6 && (p[1] - 1.0).abs() < 1e-6);
    }
}
