//! Frozen states of a tree with node versions, and trees loaded back from
//! node images: the index side of HiEngine's IACoW checkpoints (see
//! `versions` for the epochs, `checkpoint::nodes` for the medium side).

use super::key::InlineKey;
use super::node::{image_ident, Node, RootCell, ID_TAG};
use super::node_memory::OwnedNode;
use super::versions::{FreezeState, NodeVersions, MAX_IDS};
use super::BTree;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

/// The tree as the index writers of epochs up to [`epoch`](Self::epoch)
/// left it, readable while writers go on; the freeze ends on drop.
pub struct NodeSnapshot<'t> {
    versions: &'t NodeVersions,
    state: FreezeState<'t>,
}

/// Why node images do not make a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeImageError {
    /// An image is not one node long, or its id is 0 or out of range.
    Malformed,
    /// Two images carry the same node id (`BTree::from_node_images`).
    Duplicate(u64),
    /// The root id names no image.
    MissingRoot(u64),
    /// A child word names no image, or a node is reached twice, or its
    /// level is not its parent's minus one.
    BadLink(u64),
    /// Images that no path from the root reaches.
    Unreachable(usize),
    /// A node's fields are out of range, its key tails overlap, or its
    /// keys are not ascending within its parent's bounds.
    BadNode(u64),
}

impl BTree {
    /// Freezes the tree for a checkpoint (`None` without node versions).
    /// Waits only for index writes already running; one freeze at a time.
    pub fn freeze(&self) -> Option<NodeSnapshot<'_>> {
        let versions = self.root.versions()?;
        Some(NodeSnapshot {
            versions,
            state: versions.freeze(),
        })
    }

    /// A tree with node versions made of `images` (each `NODE_BYTES`
    /// long, one per node id) rooted at `root_id`; see [`TreeLoader`].
    pub fn from_node_images<'i>(
        root_id: u64,
        images: impl IntoIterator<Item = &'i [u8]>,
    ) -> Result<Self, NodeImageError> {
        let images: Vec<&[u8]> = images.into_iter().collect();
        let ids = images.iter().filter_map(|image| image_ident(image));
        let loader = TreeLoader::new(ids.map(|(id, _)| id + 1).max().unwrap_or(1));
        for image in images {
            if !loader.add(image)? {
                let id = image_ident(image).map_or(0, |(id, _)| id);
                return Err(NodeImageError::Duplicate(id));
            }
        }
        loader.finish(root_id)
    }
}

/// Builds a tree with node versions from node images, newest first: an
/// image of an id already added is an older version and is skipped.
pub struct TreeLoader {
    versions: NodeVersions,
    placed: AtomicUsize,
    id_limit: u64,
}

impl TreeLoader {
    /// A loader of node ids below `id_limit`; the caller bounds it by the
    /// images it has (ids are dense), so damage cannot size allocations.
    pub fn new(id_limit: u64) -> Self {
        Self {
            versions: NodeVersions::new(),
            placed: AtomicUsize::new(0),
            id_limit: id_limit.min(MAX_IDS),
        }
    }

    /// Adds one image; false if its id was added before. Threads may add
    /// images at once; of two with one id added at once (damage: one
    /// image of a chain has distinct ids), either may win, and the tree
    /// check in `finish` judges the result.
    pub fn add(&self, image: &[u8]) -> Result<bool, NodeImageError> {
        let node = Node::from_image(image).ok_or(NodeImageError::Malformed)?;
        self.place(node)
    }

    /// [`add`](Self::add) of the image `read` writes straight into a
    /// node's memory; `Ok(None)` if `read` refused (a checksum failed).
    pub fn add_read(
        &self,
        read: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<bool>, NodeImageError> {
        match Node::from_image_with(read) {
            Some(node) => self.place(node).map(Some),
            None => Ok(None),
        }
    }

    fn place(&self, node: OwnedNode) -> Result<bool, NodeImageError> {
        let id = node.node_id();
        if id == 0 || id >= self.id_limit {
            return Err(NodeImageError::Malformed);
        }
        if self.versions.is_placed(id) || !self.versions.place_loaded(id, node) {
            return Ok(false);
        }
        self.placed.fetch_add(1, Relaxed);
        Ok(true)
    }

    /// The tree rooted at `root_id`, once the images are checked to form
    /// one: every node reached once from the root, one level below its
    /// parent, well formed within its parent's key bounds
    /// (`Node::check_loaded`), and no image left over.
    pub fn finish(self, root_id: u64) -> Result<BTree, NodeImageError> {
        let root_word = root_id << 1 | ID_TAG;
        let placed = self.placed.into_inner();
        let (len, reached) = check_tree(&self.versions, root_word)?;
        if reached != placed {
            return Err(NodeImageError::Unreachable(placed - reached));
        }
        let root = RootCell::with_versions(self.versions, root_word);
        Ok(BTree::from_cell(root, len, placed))
    }
}

/// A node to check: its word, its parent's level, and its key bounds.
type Pending = (u64, Option<usize>, Option<InlineKey>, Option<InlineKey>);

/// Walks the loaded nodes from the root, checking each (`check_loaded`);
/// returns (entries, nodes reached).
fn check_tree(versions: &NodeVersions, root: u64) -> Result<(usize, usize), NodeImageError> {
    let limit = versions.id_limit();
    let mut seen = vec![false; limit as usize];
    let mut pending: Vec<Pending> = vec![(root, None, None, None)];
    let (mut entries, mut reached) = (0, 0);
    while let Some((word, parent_level, lower, upper)) = pending.pop() {
        let id = word >> 1;
        let node = versions.loaded(word).ok_or(match parent_level {
            None => NodeImageError::MissingRoot(id),
            Some(_) => NodeImageError::BadLink(id),
        })?;
        let seen = seen
            .get_mut(id as usize)
            .ok_or(NodeImageError::BadLink(id))?;
        if *seen || parent_level.is_some_and(|level| node.level() + 1 != level) {
            return Err(NodeImageError::BadLink(id));
        }
        if !node.check_loaded(lower.as_ref(), upper.as_ref()) {
            return Err(NodeImageError::BadNode(id));
        }
        *seen = true;
        reached += 1;
        if node.is_leaf() {
            entries += node.count();
            continue;
        }
        let children = node.child_words();
        if children.iter().any(|&child| child & ID_TAG == 0) {
            return Err(NodeImageError::BadLink(id));
        }
        for (i, child) in children.into_iter().enumerate() {
            let child_lower = match i {
                0 => lower.clone(),
                _ => Some(node.key(i - 1)),
            };
            let child_upper = match i < node.count() {
                true => Some(node.key(i)),
                false => upper.clone(),
            };
            pending.push((child, Some(node.level()), child_lower, child_upper));
        }
    }
    Ok((entries, reached))
}

impl NodeSnapshot<'_> {
    /// The epoch frozen: nodes changed in it are what an incremental
    /// checkpoint writes.
    pub fn epoch(&self) -> u64 {
        self.state.epoch
    }

    pub fn root_id(&self) -> u64 {
        self.state.root
    }

    /// Node ids of the frozen state are below this.
    pub fn id_limit(&self) -> u64 {
        self.state.id_limit
    }

    /// The epoch of the last change of node `id` in the frozen state;
    /// `None` if it did not exist then.
    pub fn changed_in(&self, id: u64) -> Option<u64> {
        if id == 0 || id >= self.state.id_limit {
            return None;
        }
        self.versions
            .frozen_version(id, self.state.epoch)
            .map(|(_, dirty)| dirty)
    }

    /// Appends the frozen image of node `id` to `out` and returns the epoch
    /// of its last change; `None` (nothing appended) if it did not exist.
    pub fn write_image(&self, id: u64, out: &mut Vec<u8>) -> Option<u64> {
        if id == 0 || id >= self.state.id_limit {
            return None;
        }
        let (node, dirty) = self.versions.frozen_version(id, self.state.epoch)?;
        node.write_image(out);
        Some(dirty)
    }
}
