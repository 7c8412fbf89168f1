//! The code gate against a corpus of sandbox escapes (classic Python jail escapes and
//! Blender-specific ones): every one is refused in enforcing mode, with the rule that caught it.

mod support;

use serde_json::json;
use support::*;
use vibe_exec::code::{Verdict, check};

/// (escape attempt, the rule that must catch it)
const ESCAPES: [(&str, &str); 47] = [
    ("import os\nos.system('rm -rf ~')", "import_not_allowed"),
    (
        "import subprocess\nsubprocess.run(['sh'])",
        "import_not_allowed",
    ),
    ("from os import system", "import_not_allowed"),
    (
        "import importlib\nimportlib.import_module('os')",
        "import_not_allowed",
    ),
    ("import sys\nsys.modules['os']", "import_not_allowed"),
    ("import builtins", "import_not_allowed"),
    ("import ctypes", "import_not_allowed"),
    ("import socket", "import_not_allowed"),
    ("import shutil", "import_not_allowed"),
    ("import pickle", "import_not_allowed"),
    ("from . import secrets", "import_not_allowed"),
    ("__import__('os').system('id')", "dunder_access"),
    (
        "().__class__.__bases__[0].__subclasses__()",
        "dunder_access",
    ),
    (
        "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == 'Popen']",
        "dunder_access",
    ),
    (
        "f = lambda: 0\nf.__globals__['__builtins__']",
        "dunder_access",
    ),
    ("print.__self__", "dunder_access"),
    ("x = __builtins__", "dunder_access"),
    ("(lambda: 0).__code__", "dunder_access"),
    ("import bpy\nbpy.__loader__", "dunder_access"),
    ("eval('1+1')", "builtin_denied"),
    ("exec('import os')", "builtin_denied"),
    ("compile('x', 'f', 'exec')", "builtin_denied"),
    ("open('/etc/passwd').read()", "builtin_denied"),
    ("getattr(().__class__, 'mro')", "builtin_denied"),
    ("setattr(object, 'x', 1)", "builtin_denied"),
    ("globals()['x'] = 1", "builtin_denied"),
    ("vars()", "builtin_denied"),
    ("breakpoint()", "builtin_denied"),
    ("ｅｖａｌ('1')", "builtin_denied"),
    ("e = exec\ne('x')", "builtin_denied"),
    ("'{0.__class__.__mro__}'.format(1)", "dunder_string"),
    (
        "import bpy\nf = lambda: None\nbpy.app.timers.register(f, persistent=True)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.app.handlers.load_post.append(print)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.app.driver_namespace['x'] = print",
        "attribute_denied",
    ),
    ("from bpy.app import timers", "import_not_allowed"),
    (
        "import bpy\nbpy.utils.execfile('/tmp/x.py')",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.utils.register_class(object)",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.data.texts['x'].as_module()",
        "attribute_denied",
    ),
    (
        "import bpy\nbpy.msgbus.subscribe_rna(key=None, owner=None, args=(), notify=print)",
        "attribute_denied",
    ),
    ("import bpy\nbpy.ops.wm.quit_blender()", "operator_denied"),
    (
        "import bpy\nbpy.ops.wm.open_mainfile(filepath='/home/ann/rig.blend')",
        "operator_denied",
    ),
    (
        "import bpy\nops = bpy.ops\nops.wm.save_as_mainfile(filepath='/tmp/x.blend')",
        "operator_denied",
    ),
    (
        "import bpy\nbpy.ops.preferences.addon_install(filepath='/tmp/evil.zip')",
        "operator_denied",
    ),
    (
        "import bpy\nm = bpy.data.materials.new('m')\nm.node_tree.nodes.new('ShaderNodeScript')",
        "script_node",
    ),
    (
        "import bpy\nw = bpy.ops.wm\nw.quit_blender()",
        "operator_denied",
    ),
    (
        "import bpy\no = bpy.ops\ns = o.script\ns.python_file_run(filepath='/tmp/x.py')",
        "operator_denied",
    ),
    (
        "import bpy\np = bpy.ops.preferences\np.addon_enable(module='evil')",
        "operator_denied",
    ),
];

const CLEAN: [&str; 6] = [
    "import bpy\nbpy.data.objects['Cube'].location.x += 1",
    "import bpy, bmesh\nfrom mathutils import Vector\nv = Vector((1, 2, 3))\nprint(v.length)",
    "import math, random\nrandom.seed(1)\nprint(math.sqrt(random.random()))",
    "import bpy\nfor o in bpy.data.objects:\n    print(f'{o.name}: {o.type}')",
    "import bpy\nbpy.ops.mesh.primitive_cube_add(size=1)",
    "import json\nprint(json.dumps({'a': [1, 2]}))",
];

#[test]
fn the_escape_corpus_is_refused_in_full_with_the_rule_that_caught_it() {
    assert!(ESCAPES.len() >= 40);
    for (code, rule) in ESCAPES {
        match check(code) {
            Verdict::Violations(found) => {
                assert!(
                    found.iter().any(|v| v.rule == rule),
                    "{code:?}: expected {rule}, got {found:?}"
                );
                assert!(found.iter().all(|v| v.line >= 1 && v.column >= 1));
            }
            other => panic!("{code:?} was not refused: {other:?}"),
        }
    }
}

#[test]
fn ordinary_blender_code_passes() {
    for code in CLEAN {
        assert_eq!(check(code), Verdict::Clean, "{code:?}");
    }
}

#[test]
fn syntax_errors_come_back_with_line_and_column() {
    match check("import bpy\nfor o in bpy.data.objects\n    print(o)") {
        Verdict::Syntax(issue) => assert_eq!(issue.line, 2, "{issue:?}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn enforcing_mode_blocks_and_turns_the_session_read_only() {
    let (transport, builder) = builder(python_mock(), None, &["code_exec"]);
    let p = builder.code_gate().start().await.unwrap();
    let syntax = p.call("python.exec", json!({"code": "print(1"})).await;
    assert_eq!(syntax.error().unwrap().details["reason"], "syntax");
    assert_eq!(syntax.error().unwrap().details["line"], 1);
    let before = transport.count();
    let blocked = p
        .call(
            "python.exec",
            json!({"code": "import os\nprint(os.getcwd())"}),
        )
        .await;
    let error = blocked.error().unwrap();
    assert_eq!(error.details["reason"], "security_block");
    assert_eq!(error.details["rule"], "import_not_allowed");
    assert_eq!(
        transport.count(),
        before,
        "the blocked code never reached Blender"
    );
    assert!(
        p.session().is_read_only(),
        "seed 000: a security breach sets READ_ONLY"
    );
}

#[tokio::test]
async fn log_only_mode_records_and_runs() {
    let constraints = vibe_contract::Constraints {
        code_gate: vibe_contract::CodeGateMode::LogOnly,
        ..Default::default()
    };
    let (_transport, mut builder_) =
        builder(python_mock(), Some(constraints.clone()), &["code_exec"]);
    // Both sides must ask for full trust: the bridge policy here keeps its default (enforcing),
    // so negotiation keeps enforcing.
    assert_eq!(
        builder_
            .stage_names()
            .iter()
            .filter(|(_, n)| *n == "code_gate")
            .count(),
        1
    );
    builder_ = builder_.code_gate();
    let p = builder_.start().await.unwrap();
    assert_eq!(
        p.session().agreement.contract.constraints.code_gate,
        vibe_contract::CodeGateMode::Enforcing
    );

    let transport = std::sync::Arc::new(Counting {
        inner: vibe_transport::MockTransport::new(python_mock()),
        calls: Default::default(),
    });
    let hello = vibe_transport::Transport::hello(transport.as_ref()).clone();
    let host = vibe_contract::HostProfile {
        name: "t".into(),
        version: "1".into(),
        capabilities: caps(&["scene.read", "scene.write", "code_exec"]),
        ..Default::default()
    };
    let mut proposal = vibe_contract::HostProposal::new("trust", host);
    proposal.constraints = Some(constraints.clone());
    let mut policy = vibe_contract::BridgePolicy {
        constraints,
        ..Default::default()
    };
    policy.capabilities.insert("code_exec".into());
    let agreement = vibe_contract::negotiate(
        &proposal,
        &policy,
        &hello.blender,
        &vibe_contract::blender_core_v1().unwrap(),
    )
    .unwrap();
    let dyn_transport: std::sync::Arc<dyn vibe_transport::Transport> = transport.clone();
    let p = vibe_exec::Pipeline::builder(agreement, dyn_transport)
        .code_gate()
        .start()
        .await
        .unwrap();
    let ran = p
        .call(
            "python.exec",
            json!({"code": "import os\nprint('full trust')"}),
        )
        .await;
    assert_eq!(ran.result().unwrap()["stdout"], "full trust\n");
    assert!(!p.session().is_read_only());
}
