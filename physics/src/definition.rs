//! Room definitions: the static geometry, bounds, spawn point and props of one room, loaded from
//! TOML or JSON and checked by [`RoomDefinition::validate`].
//!
//! This module only describes a room; it builds no physics world (see [`crate::RoomPhysics`]).
//! The only I/O in the crate is [`RoomDefinition::from_path`], an explicit file loader.

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Most static shapes a definition may hold (bounds the work a hostile file can cause).
pub const MAX_STATICS: usize = 4096;
/// Most props a definition may hold.
pub const MAX_PROPS: usize = 4096;
/// Largest extent (metres) of any coordinate, size or bound in a definition.
pub const MAX_EXTENT_M: f32 = 100_000.0;

/// The default plaza room, shipped with the crate.
const DEFAULT_PLAZA_TOML: &str = include_str!("../rooms/plaza.toml");

/// One room: axis-aligned bounds, spawn point, static geometry and dynamic props.
///
/// Positions are in metres, y up. An avatar position is the point between its feet (the bottom
/// of its capsule), so an avatar standing on a floor whose top is at `y = 0` has `y = 0`.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RoomDefinition {
    /// Human-readable room name (non-empty).
    pub name: String,
    /// Minimum corner of the room's bounds; moves outside are rejected.
    pub bounds_min: [f32; 3],
    /// Maximum corner of the room's bounds.
    pub bounds_max: [f32; 3],
    /// Where avatars appear when no (valid) position is given.
    pub spawn: [f32; 3],
    /// Gravity applied to dynamic props (m/s²).
    #[serde(default = "default_gravity")]
    pub gravity: [f32; 3],
    /// Fixed geometry: floor, walls, boxes, ramps.
    #[serde(default)]
    pub statics: Vec<StaticShape>,
    /// Dynamic props that can be held, placed and thrown.
    #[serde(default)]
    pub props: Vec<PropDef>,
    /// Named spawn points (teleport destinations). Joiners appear around `spawn`; a spawn point
    /// is where a portal or a teleport request leads.
    #[serde(default)]
    pub spawn_points: Vec<SpawnPoint>,
    /// Portals: an avatar whose accepted move ends within a portal's radius is moved by the
    /// server to the portal's target spawn point.
    #[serde(default)]
    pub portals: Vec<Portal>,
}

/// Most spawn points and portals a definition may hold (each).
pub const MAX_DESTINATIONS: usize = 256;
/// Longest spawn point or portal name, bytes.
pub const MAX_DESTINATION_NAME: usize = 64;

/// A named place avatars can be sent to.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnPoint {
    /// Room-unique name (non-empty, at most [`MAX_DESTINATION_NAME`] bytes).
    pub name: String,
    /// Feet position on arrival.
    pub position: [f32; 3],
    /// Yaw on arrival, degrees.
    #[serde(default)]
    pub yaw_deg: f32,
    /// Whether a client may ask to be sent here (`plaza.v1.TeleportRequest`).
    #[serde(default)]
    pub requestable: bool,
}

/// A portal: a sphere that sends whoever walks into it to a spawn point.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Portal {
    /// Room-unique name among portals.
    pub name: String,
    /// Centre of the trigger sphere (feet positions are tested).
    pub position: [f32; 3],
    /// Radius of the trigger sphere, metres (> 0).
    pub radius: f32,
    /// Name of the spawn point it leads to.
    pub target: String,
}

fn default_gravity() -> [f32; 3] {
    [0.0, -9.81, 0.0]
}

fn default_density() -> f32 {
    1.0
}

/// One piece of fixed geometry.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(tag = "shape", rename_all = "snake_case", deny_unknown_fields)]
pub enum StaticShape {
    /// A box (cuboid), optionally rotated.
    Box {
        /// Label for diagnostics.
        #[serde(default)]
        name: String,
        /// Centre of the box.
        center: [f32; 3],
        /// Half the box's size along its local x, y, z axes (all > 0).
        half_extents: [f32; 3],
        /// Rotation as Euler angles in degrees, applied in the order x, then y, then z.
        #[serde(default)]
        rotation_deg: [f32; 3],
    },
    /// An upright cylinder (pillar, fountain).
    Cylinder {
        /// Label for diagnostics.
        #[serde(default)]
        name: String,
        /// Centre of the cylinder.
        center: [f32; 3],
        /// Half its height (> 0).
        half_height: f32,
        /// Its radius (> 0).
        radius: f32,
    },
    /// A ramp: a slab whose top surface runs from `from` to `to` (points on the walking surface,
    /// along the ramp's centre line).
    Ramp {
        /// Label for diagnostics.
        #[serde(default)]
        name: String,
        /// Lower (or start) point of the walking surface.
        from: [f32; 3],
        /// Upper (or end) point of the walking surface.
        to: [f32; 3],
        /// Width across the ramp (> 0).
        width: f32,
        /// Thickness of the slab below the surface (> 0).
        thickness: f32,
    },
}

impl StaticShape {
    /// The shape's label (may be empty).
    pub fn name(&self) -> &str {
        match self {
            Self::Box { name, .. } | Self::Cylinder { name, .. } | Self::Ramp { name, .. } => name,
        }
    }
}

/// The collision shape of a prop.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Serialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum PropShape {
    /// A box with the given half extents (all > 0).
    Box {
        /// Half size along x, y, z.
        half_extents: [f32; 3],
    },
    /// A ball.
    Ball {
        /// Radius (> 0).
        radius: f32,
    },
}

/// A dynamic prop: rests where it is put, falls under gravity, can be held and thrown.
///
/// (Unknown keys are not denied here: serde cannot combine that with the flattened shape.)
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
pub struct PropDef {
    /// Room-unique prop id (the id on the wire).
    pub id: u32,
    /// Label for diagnostics.
    #[serde(default)]
    pub name: String,
    /// Where the prop starts (its centre).
    pub position: [f32; 3],
    /// Collision shape.
    #[serde(flatten)]
    pub shape: PropShape,
    /// Density in kg/m³·10⁻³ as rapier counts it (default 1.0).
    #[serde(default = "default_density")]
    pub density: f32,
}

/// Why a room definition could not be loaded or is not valid.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DefinitionError {
    /// The file could not be read.
    #[error("cannot read room definition {path}: {source}")]
    Io {
        /// The path that failed.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The TOML text does not parse into a definition.
    #[error("invalid room definition TOML: {0}")]
    Toml(#[from] toml::de::Error),
    /// The JSON text does not parse into a definition.
    #[error("invalid room definition JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A file extension other than `.toml` or `.json`.
    #[error("unknown room definition format {0:?} (expected .toml or .json)")]
    UnknownFormat(String),
    /// The name is empty.
    #[error("room name is empty")]
    EmptyName,
    /// A number is NaN, infinite or larger than [`MAX_EXTENT_M`].
    #[error("{0} is not finite or out of range")]
    NonFinite(String),
    /// `bounds_min` is not strictly below `bounds_max` on every axis.
    #[error("bounds_min must be < bounds_max on every axis")]
    InvalidBounds,
    /// The spawn point is outside the bounds.
    #[error("spawn point is outside the room bounds")]
    SpawnOutOfBounds,
    /// A shape has a non-positive size.
    #[error("shape {0:?} has a non-positive size")]
    InvalidShape(String),
    /// Two props share an id.
    #[error("duplicate prop id {0}")]
    DuplicateProp(u32),
    /// A prop starts outside the bounds (or, when added at run time, inside static geometry).
    #[error("prop {0} starts outside the room bounds or inside geometry")]
    PropOutOfBounds(u32),
    /// A spawn point or portal with an empty, too long or duplicate name.
    #[error("destination name {0:?} is empty, too long or not unique")]
    BadDestinationName(String),
    /// A spawn point or portal outside the bounds.
    #[error("destination {0:?} is outside the room bounds")]
    DestinationOutOfBounds(String),
    /// A portal whose target names no spawn point.
    #[error("portal {0:?} leads to no spawn point")]
    UnknownPortalTarget(String),
    /// Too many statics or props.
    #[error("too many {what} (at most {max})")]
    TooMany {
        /// "statics" or "props".
        what: &'static str,
        /// The limit.
        max: usize,
    },
}

impl RoomDefinition {
    /// Parses a TOML definition and validates it.
    pub fn from_toml_str(s: &str) -> Result<Self, DefinitionError> {
        let def: Self = toml::from_str(s)?;
        def.validate()?;
        Ok(def)
    }

    /// Parses a JSON definition and validates it.
    pub fn from_json_str(s: &str) -> Result<Self, DefinitionError> {
        let def: Self = serde_json::from_str(s)?;
        def.validate()?;
        Ok(def)
    }

    /// Reads a `.toml` or `.json` definition file and validates it (the crate's only I/O).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, DefinitionError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| DefinitionError::Io {
            path: path.display().to_string(),
            source,
        })?;
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("toml") => Self::from_toml_str(&text),
            Some(ext) if ext.eq_ignore_ascii_case("json") => Self::from_json_str(&text),
            other => Err(DefinitionError::UnknownFormat(
                other.unwrap_or_default().to_owned(),
            )),
        }
    }

    /// The plaza room shipped with the project (`physics/rooms/plaza.toml`).
    pub fn default_plaza() -> Self {
        // The shipped file is covered by a unit test; a broken file is a build defect.
        Self::from_toml_str(DEFAULT_PLAZA_TOML).expect("shipped rooms/plaza.toml is valid")
    }

    /// Checks bounds, finiteness, sizes, limits and prop-id uniqueness.
    pub fn validate(&self) -> Result<(), DefinitionError> {
        if self.name.trim().is_empty() {
            return Err(DefinitionError::EmptyName);
        }
        check_vec("bounds_min", self.bounds_min)?;
        check_vec("bounds_max", self.bounds_max)?;
        check_vec("spawn", self.spawn)?;
        check_vec("gravity", self.gravity)?;
        if (0..3).any(|i| self.bounds_min[i] >= self.bounds_max[i]) {
            return Err(DefinitionError::InvalidBounds);
        }
        if !self.contains(self.spawn) {
            return Err(DefinitionError::SpawnOutOfBounds);
        }
        if self.statics.len() > MAX_STATICS {
            return Err(DefinitionError::TooMany {
                what: "statics",
                max: MAX_STATICS,
            });
        }
        if self.props.len() > MAX_PROPS {
            return Err(DefinitionError::TooMany {
                what: "props",
                max: MAX_PROPS,
            });
        }
        for (i, s) in self.statics.iter().enumerate() {
            check_static(i, s)?;
        }
        let mut ids = std::collections::BTreeSet::new();
        for p in &self.props {
            if !ids.insert(p.id) {
                return Err(DefinitionError::DuplicateProp(p.id));
            }
            check_prop(p)?;
            if !self.contains(p.position) {
                return Err(DefinitionError::PropOutOfBounds(p.id));
            }
        }
        self.validate_destinations()
    }

    fn validate_destinations(&self) -> Result<(), DefinitionError> {
        if self.spawn_points.len() > MAX_DESTINATIONS || self.portals.len() > MAX_DESTINATIONS {
            return Err(DefinitionError::TooMany {
                what: "spawn points or portals",
                max: MAX_DESTINATIONS,
            });
        }
        let bad_name = |n: &str| n.trim().is_empty() || n.len() > MAX_DESTINATION_NAME;
        let mut names = std::collections::BTreeSet::new();
        for sp in &self.spawn_points {
            if bad_name(&sp.name) || !names.insert(sp.name.as_str()) {
                return Err(DefinitionError::BadDestinationName(sp.name.clone()));
            }
            check_vec(&sp.name, sp.position)?;
            if !sp.yaw_deg.is_finite() {
                return Err(DefinitionError::NonFinite(sp.name.clone()));
            }
            if !self.contains(sp.position) {
                return Err(DefinitionError::DestinationOutOfBounds(sp.name.clone()));
            }
        }
        let mut portals = std::collections::BTreeSet::new();
        for p in &self.portals {
            if bad_name(&p.name) || !portals.insert(p.name.as_str()) {
                return Err(DefinitionError::BadDestinationName(p.name.clone()));
            }
            check_vec(&p.name, p.position)?;
            check_positive(&p.name, &[p.radius])?;
            if !self.contains(p.position) {
                return Err(DefinitionError::DestinationOutOfBounds(p.name.clone()));
            }
            if !names.contains(p.target.as_str()) {
                return Err(DefinitionError::UnknownPortalTarget(p.name.clone()));
            }
        }
        Ok(())
    }

    /// The spawn point named `name`.
    pub fn spawn_point(&self, name: &str) -> Option<&SpawnPoint> {
        self.spawn_points.iter().find(|s| s.name == name)
    }

    /// The first portal whose sphere contains the feet position `p`.
    pub fn portal_at(&self, p: [f32; 3]) -> Option<&Portal> {
        self.portals.iter().find(|portal| {
            let d2: f32 = (0..3).map(|i| (p[i] - portal.position[i]).powi(2)).sum();
            d2 <= portal.radius * portal.radius
        })
    }

    /// Whether `p` lies within the room bounds (inclusive). False for non-finite points.
    pub fn contains(&self, p: [f32; 3]) -> bool {
        (0..3).all(|i| p[i] >= self.bounds_min[i] && p[i] <= self.bounds_max[i])
    }
}

/// Checks one static shape (finite, positive sizes, ramps with a horizontal run).
pub(crate) fn check_static(index: usize, s: &StaticShape) -> Result<(), DefinitionError> {
    let label = if s.name().is_empty() {
        format!("statics[{index}]")
    } else {
        s.name().to_owned()
    };
    match s {
        StaticShape::Box {
            center,
            half_extents,
            rotation_deg,
            ..
        } => {
            check_vec(&label, *center)?;
            check_vec(&label, *rotation_deg)?;
            check_positive(&label, half_extents)
        }
        StaticShape::Cylinder {
            center,
            half_height,
            radius,
            ..
        } => {
            check_vec(&label, *center)?;
            check_positive(&label, &[*half_height, *radius])
        }
        StaticShape::Ramp {
            from,
            to,
            width,
            thickness,
            ..
        } => {
            check_vec(&label, *from)?;
            check_vec(&label, *to)?;
            check_positive(&label, &[*width, *thickness])?;
            let d = [to[0] - from[0], to[1] - from[1], to[2] - from[2]];
            let horizontal = (d[0] * d[0] + d[2] * d[2]).sqrt();
            // A ramp needs a horizontal run; a vertical one is a wall (use a box).
            if horizontal < 1e-3 {
                return Err(DefinitionError::InvalidShape(label));
            }
            Ok(())
        }
    }
}

/// Checks one prop's own numbers (not its id's uniqueness nor the room bounds).
pub(crate) fn check_prop(p: &PropDef) -> Result<(), DefinitionError> {
    let label = format!("prop {}", p.id);
    check_vec(&label, p.position)?;
    check_positive(&label, &[p.density])?;
    match p.shape {
        PropShape::Box { half_extents } => check_positive(&label, &half_extents),
        PropShape::Ball { radius } => check_positive(&label, &[radius]),
    }
}

fn check_vec(what: &str, v: [f32; 3]) -> Result<(), DefinitionError> {
    if v.iter().all(|x| x.is_finite() && x.abs() <= MAX_EXTENT_M) {
        Ok(())
    } else {
        Err(DefinitionError::NonFinite(what.to_owned()))
    }
}

fn check_positive(what: &str, v: &[f32]) -> Result<(), DefinitionError> {
    if v.iter().any(|x| !x.is_finite() || *x > MAX_EXTENT_M) {
        return Err(DefinitionError::NonFinite(what.to_owned()));
    }
    if v.iter().all(|x| *x > 0.0) {
        Ok(())
    } else {
        Err(DefinitionError::InvalidShape(what.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_plaza_parses_and_validates() {
        let def = RoomDefinition::default_plaza();
        assert_eq!(def.name, "plaza");
        assert!(!def.statics.is_empty());
        assert!(!def.props.is_empty());
        def.validate().unwrap();
    }

    #[test]
    fn destinations_validate() {
        let mut base = RoomDefinition::default_plaza();
        assert!(
            base.spawn_point("stage").is_some(),
            "the plaza ships spawn points"
        );
        assert!(
            base.portals.is_empty(),
            "bots walk the default plaza: no portals there"
        );
        base.portals.push(Portal {
            name: "to-stage".into(),
            position: [8.0, 0.0, -8.0],
            radius: 1.0,
            target: "stage".into(),
        });
        base.validate().unwrap();
        let portal = &base.portals[0];
        assert_eq!(
            base.portal_at(portal.position).map(|p| &p.name),
            Some(&portal.name)
        );
        assert!(base.portal_at([1000.0, 0.0, 0.0]).is_none());
        let mut bad = base.clone();
        bad.portals[0].target = "nowhere".into();
        assert!(matches!(
            bad.validate(),
            Err(DefinitionError::UnknownPortalTarget(_))
        ));
        let mut bad = base.clone();
        bad.spawn_points.push(bad.spawn_points[0].clone());
        assert!(matches!(
            bad.validate(),
            Err(DefinitionError::BadDestinationName(_))
        ));
        let mut bad = base.clone();
        bad.spawn_points[0].position = [0.0, 0.0, 500.0];
        assert!(matches!(
            bad.validate(),
            Err(DefinitionError::DestinationOutOfBounds(_))
        ));
        let mut bad = base;
        bad.portals[0].radius = 0.0;
        assert!(matches!(
            bad.validate(),
            Err(DefinitionError::InvalidShape(_))
        ));
    }

    #[test]
    fn json_roundtrip() {
        let def = RoomDefinition::default_plaza();
        let json = serde_json::to_string(&def).unwrap();
        let back = RoomDefinition::from_json_str(&json).unwrap();
        assert_eq!(def, back);
        let toml_text = toml::to_string(&def).unwrap();
        assert_eq!(RoomDefinition::from_toml_str(&toml_text).unwrap(), def);
    }

    fn minimal() -> RoomDefinition {
        RoomDefinition::from_toml_str(
            r#"
name = "t"
bounds_min = [-10.0, -1.0, -10.0]
bounds_max = [10.0, 10.0, 10.0]
spawn = [0.0, 0.0, 0.0]
[[statics]]
shape = "box"
name = "floor"
center = [0.0, -0.5, 0.0]
half_extents = [10.0, 0.5, 10.0]
[[props]]
id = 1
shape = "ball"
radius = 0.2
position = [1.0, 1.0, 1.0]
"#,
        )
        .unwrap()
    }

    #[test]
    fn rejects_invalid_definitions() {
        let mut d = minimal();
        d.bounds_min[0] = 20.0;
        assert!(matches!(d.validate(), Err(DefinitionError::InvalidBounds)));

        let mut d = minimal();
        d.spawn = [50.0, 0.0, 0.0];
        assert!(matches!(
            d.validate(),
            Err(DefinitionError::SpawnOutOfBounds)
        ));

        let mut d = minimal();
        d.spawn[1] = f32::NAN;
        assert!(matches!(d.validate(), Err(DefinitionError::NonFinite(_))));

        let mut d = minimal();
        d.props.push(d.props[0].clone());
        assert!(matches!(
            d.validate(),
            Err(DefinitionError::DuplicateProp(1))
        ));

        let mut d = minimal();
        d.props[0].position = [0.0, 100.0, 0.0];
        assert!(matches!(
            d.validate(),
            Err(DefinitionError::PropOutOfBounds(1))
        ));

        let mut d = minimal();
        if let StaticShape::Box { half_extents, .. } = &mut d.statics[0] {
            half_extents[1] = 0.0;
        }
        assert!(matches!(
            d.validate(),
            Err(DefinitionError::InvalidShape(_))
        ));

        let mut d = minimal();
        d.name = " ".into();
        assert!(matches!(d.validate(), Err(DefinitionError::EmptyName)));
    }

    #[test]
    fn parse_errors_are_typed() {
        assert!(matches!(
            RoomDefinition::from_toml_str("name = 3"),
            Err(DefinitionError::Toml(_))
        ));
        assert!(matches!(
            RoomDefinition::from_json_str("{"),
            Err(DefinitionError::Json(_))
        ));
        assert!(matches!(
            RoomDefinition::from_path("/nonexistent/room.toml"),
            Err(DefinitionError::Io { .. })
        ));
    }

    #[test]
    fn from_path_reads_json_and_refuses_unknown_extensions() {
        let dir = std::env::temp_dir().join(format!("plaza-physics-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("room.json");
        let def = minimal();
        std::fs::write(&json, serde_json::to_string_pretty(&def).unwrap()).unwrap();
        assert_eq!(RoomDefinition::from_path(&json).unwrap(), def);
        let yaml = dir.join("room.yaml");
        std::fs::write(&yaml, "name: x").unwrap();
        assert!(matches!(
            RoomDefinition::from_path(&yaml),
            Err(DefinitionError::UnknownFormat(ext)) if ext == "yaml"
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = RoomDefinition::from_toml_str(
            "name = \"x\"\nbounds_min = [0.0, 0.0, 0.0]\nbounds_max = [1.0, 1.0, 1.0]\n\
             spawn = [0.5, 0.5, 0.5]\nspwan = [0.0, 0.0, 0.0]\n",
        );
        assert!(matches!(err, Err(DefinitionError::Toml(_))), "{err:?}");
    }

    #[test]
    fn from_path_reads_the_shipped_file() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/rooms/plaza.toml");
        assert_eq!(
            RoomDefinition::from_path(path).unwrap(),
            RoomDefinition::default_plaza()
        );
    }
}
