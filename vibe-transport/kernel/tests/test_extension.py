"""The GUI add-on as a Blender extension: the manifest, the deterministic zip
(build_extension.py), Blender's own validator where this Blender has it, the listener's settings
(environment, then preferences, then defaults) and bind decision, the generated token's file, and
the zip installed into a throwaway Blender user folder (an extension on 4.2+, a legacy add-on
before), enabled, listening, and logged into with the token (extension_probe.py, in a child
process: the user folders are read when Blender starts). Runs like test_kernel.py."""

import json
import os
import re
import socket
import stat
import subprocess
import sys
import tempfile
import unittest
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = os.path.dirname(HERE)
sys.path.insert(0, KERNEL)

import bpy  # noqa: E402

import build_extension  # noqa: E402
from vibe_kernel import addon_settings, tcp  # noqa: E402
from vibe_kernel.addon_settings import SettingsError, bind_decision, resolve  # noqa: E402

SOURCE = os.path.join(KERNEL, "vibe_kernel")
STRONG = "s3cret-token-0123456789"  # 23 characters


def setUpModule():
    global WORK, ZIP
    WORK = tempfile.TemporaryDirectory(prefix="vibe-ext-test-")
    ZIP = build_extension.build(os.path.join(WORK.name, "dist"))


def tearDownModule():
    WORK.cleanup()


class BindDecisionTest(unittest.TestCase):
    def test_loopback_is_allowed_quietly_with_or_without_a_token(self):
        for bind in ("127.0.0.1", "127.0.0.2", "localhost", "LOCALHOST"):
            for token in (None, "short", STRONG):
                self.assertEqual(bind_decision(bind, token), (True, None), (bind, token))

    def test_a_non_loopback_bind_without_a_token_is_refused(self):
        for bind in ("0.0.0.0", "192.168.1.20", "10.0.0.1"):
            allowed, message = bind_decision(bind, None)
            self.assertFalse(allowed)
            self.assertIn("not listening", message)
            self.assertIn(bind, message)
            self.assertIn("at least 16 characters", message)
            self.assertIn("no token was given", message)

    def test_a_short_token_is_refused_and_never_shown(self):
        token = "x" * (addon_settings.MIN_REMOTE_TOKEN_CHARS - 1)
        allowed, message = bind_decision("0.0.0.0", token)
        self.assertFalse(allowed)
        self.assertIn("shorter than 16 characters", message)
        self.assertNotIn(token, message)

    def test_a_long_enough_token_is_allowed_with_a_warning(self):
        for token in ("y" * addon_settings.MIN_REMOTE_TOKEN_CHARS, STRONG):
            allowed, message = bind_decision("0.0.0.0", token)
            self.assertTrue(allowed)
            self.assertIn("WARNING", message)
            self.assertIn("not loopback", message)
            self.assertNotIn(token, message)

    def test_anything_but_an_ipv4_address_or_localhost_is_refused(self):
        for bind in ("::1", "::", "example.com", "127.0.0.1:9833", "", "300.1.1.1"):
            allowed, message = bind_decision(bind, STRONG)
            self.assertFalse(allowed, bind)
            self.assertIn("not listening", message)


class ResolveTest(unittest.TestCase):
    PREFS = {"port": 9900, "bind": "127.0.0.5", "token": "from-prefs"}

    def test_defaults_without_environment_or_preferences(self):
        settings = resolve({}, None)
        self.assertEqual((settings["port"], settings["bind"], settings["token"]), (9833, "127.0.0.1", None))
        self.assertEqual(settings["sources"], {"port": "default", "bind": "default", "token": "generated"})

    def test_preferences_over_defaults(self):
        settings = resolve({}, self.PREFS)
        self.assertEqual((settings["port"], settings["bind"], settings["token"]), (9900, "127.0.0.5", "from-prefs"))
        self.assertEqual(set(settings["sources"].values()), {"preferences"})

    def test_environment_over_preferences(self):
        env = {"VIBE_PORT": "9901", "VIBE_BIND": "127.0.0.6", "VIBE_TOKEN": "from-env"}
        settings = resolve(env, self.PREFS)
        self.assertEqual((settings["port"], settings["bind"], settings["token"]), (9901, "127.0.0.6", "from-env"))
        self.assertEqual(settings["sources"], {"port": "VIBE_PORT", "bind": "VIBE_BIND", "token": "VIBE_TOKEN"})

    def test_each_setting_falls_back_on_its_own(self):
        settings = resolve({"VIBE_TOKEN": "from-env", "VIBE_BIND": ""}, {"port": 9900, "bind": "", "token": ""})
        self.assertEqual((settings["port"], settings["bind"], settings["token"]), (9900, "127.0.0.1", "from-env"))

    def test_a_bad_port_is_refused_by_name(self):
        for port in ("abc", "-1", "70000"):
            with self.assertRaises(SettingsError) as caught:
                resolve({"VIBE_PORT": port}, None)
            self.assertIn("VIBE_PORT", str(caught.exception))


class TokenFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.saved, tempfile.tempdir = tempfile.tempdir, self.dir.name
        self.path = os.path.join(self.dir.name, "vibe-kernel-token-%d" % os.getpid())
        self.victim = os.path.join(self.dir.name, "victim")
        with open(self.victim, "w") as f:
            f.write("untouched")
        os.chmod(self.victim, 0o644)

    def tearDown(self):
        tempfile.tempdir = self.saved
        self.dir.cleanup()

    def assert_private(self, path, token):
        self.assertFalse(os.path.islink(path))
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
        with open(path, encoding="utf-8") as f:
            self.assertEqual(f.read().strip(), token)
        with open(self.victim, encoding="utf-8") as f:
            self.assertEqual(f.read(), "untouched")

    def test_a_fresh_private_file(self):
        token, path = tcp.make_token()
        self.assertEqual(path, self.path)
        self.assertGreaterEqual(len(token), 32)
        self.assert_private(path, token)

    def test_a_link_at_the_path_is_never_written_through(self):
        os.symlink(self.victim, self.path)
        token, path = tcp.make_token()
        self.assert_private(path, token)

    def test_a_readable_file_left_at_the_path_is_replaced_not_reused(self):
        os.link(self.victim, self.path)  # the same file: writing into it would show in the victim
        token, path = tcp.make_token()
        self.assert_private(path, token)

    @unittest.skipUnless(hasattr(os, "geteuid") and os.geteuid() == 0, "needs root to plant another user's file")
    def test_another_users_file_at_the_path_is_left_alone(self):
        os.link(self.victim, self.path)
        os.chown(self.path, 12345, 12345)
        token, path = tcp.make_token()
        self.assertNotEqual(path, self.path)
        self.assert_private(path, token)


class BuildTest(unittest.TestCase):
    def test_the_same_source_gives_the_same_bytes(self):
        again = build_extension.build(os.path.join(WORK.name, "again"))
        self.assertEqual(os.path.basename(again), os.path.basename(ZIP))
        with open(ZIP, "rb") as a, open(again, "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_one_folder_with_the_kernel_files_only(self):
        with zipfile.ZipFile(ZIP) as archive:
            infos = archive.infolist()
        names = [i.filename for i in infos]
        self.assertEqual(names, sorted(names))
        self.assertTrue(all(n.startswith("vibe_kernel/") for n in names), names)
        shipped = {n[len("vibe_kernel/"):] for n in names}
        self.assertEqual(shipped, set(build_extension.package_files(SOURCE)))
        for needed in ("__init__.py", "blender_manifest.toml", "registry.json", "preferences.py",
                       "addon_settings.py", "wire.py"):
            self.assertIn(needed, shipped)
        self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/tests/" in n])
        self.assertEqual({i.date_time for i in infos}, {build_extension.FIXED_TIME})
        self.assertEqual({i.external_attr >> 16 for i in infos}, {0o100644})

    def test_tests_caches_and_hidden_files_are_left_out(self):
        source = os.path.join(WORK.name, "dirty", "vibe_kernel")
        os.makedirs(os.path.join(source, "__pycache__"))
        os.makedirs(os.path.join(source, "tests"))
        for name in ("__init__.py", "blender_manifest.toml"):
            with open(os.path.join(SOURCE, name), "rb") as f, open(os.path.join(source, name), "wb") as g:
                g.write(f.read())
        for junk in ("__pycache__/wire.cpython-311.pyc", "tests/test_x.py", ".hidden", "tools.py~", "x.pyc"):
            with open(os.path.join(source, junk), "w") as f:
                f.write("junk")
        self.assertEqual(build_extension.package_files(source), ["__init__.py", "blender_manifest.toml"])

    def test_the_manifest_and_bl_info_agree_on_the_version(self):
        from vibe_kernel import bl_info
        version = ".".join(str(n) for n in bl_info["version"])
        self.assertEqual(build_extension.manifest_version(SOURCE), version)
        self.assertTrue(ZIP.endswith("vibe_kernel-%s.zip" % version))


class ManifestTest(unittest.TestCase):
    def test_the_manifest_declares_what_blender_asks(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("no tomllib in this Python (3.11+)")
        from vibe_kernel import bl_info
        with open(os.path.join(SOURCE, "blender_manifest.toml"), "rb") as f:
            manifest = tomllib.load(f)
        self.assertEqual(manifest["schema_version"], "1.0.0")
        self.assertEqual(manifest["id"], "vibe_kernel")
        self.assertEqual(manifest["version"], ".".join(str(n) for n in bl_info["version"]))
        self.assertEqual(manifest["blender_version_min"], "4.2.0")
        self.assertEqual(manifest["type"], "add-on")
        self.assertEqual(manifest["license"], ["SPDX:MIT", "SPDX:Apache-2.0"])
        self.assertTrue(manifest["tagline"] and manifest["maintainer"])
        self.assertEqual(set(manifest["permissions"]), {"network", "files"})
        self.assertTrue(all(manifest["permissions"].values()), "each permission says why")
        self.assertEqual(bl_info["blender"], (3, 4, 0), "the legacy add-on still starts at 3.4")


class FakeLayout:
    """Stands in for a UILayout: records the labels drawn and whether they were alerts."""

    def __init__(self, lines, alert=False):
        self.lines, self.alert = lines, alert

    def prop(self, owner, name):
        self.lines.append(("prop", name, False))

    def label(self, text="", icon="NONE"):
        self.lines.append((icon, text, self.alert))

    def box(self):
        return FakeLayout(self.lines, self.alert)


class PreferencesDrawTest(unittest.TestCase):
    """What the preferences show for each state of the listener (drawn into a stand-in layout:
    a background Blender draws no UI)."""

    def draw(self, **status):
        from vibe_kernel import preferences
        saved = dict(preferences.STATUS)
        preferences.STATUS.clear()
        preferences.STATUS.update(status)
        lines = []
        owner = type("Prefs", (), {"layout": FakeLayout(lines), "token": STRONG})()
        try:
            preferences.VibeKernelPreferences.draw(owner, None)
        finally:
            preferences.STATUS.clear()
            preferences.STATUS.update(saved)
        self.assertEqual([line[1] for line in lines[:3]], ["port", "bind", "token"])
        self.assertFalse([line for line in lines if STRONG in line[1]], "the token is never drawn as text")
        return " ".join(line[1] for line in lines), [line for line in lines if line[2]]

    def test_listening_names_the_address_and_the_token_file(self):
        text, alerts = self.draw(state="listening", address="127.0.0.1:9833", token_source="generated",
                                 token_file="/tmp/vibe-kernel-token-1", sources={"port": "VIBE_PORT"})
        self.assertIn("Listening on 127.0.0.1:9833", text)
        self.assertIn("generated, in /tmp/vibe-kernel-token-1", text)
        self.assertIn("Set by the environment: VIBE_PORT", text)
        self.assertEqual(alerts, [])

    def test_a_non_loopback_bind_shows_the_warning_as_an_alert(self):
        warning = bind_decision("0.0.0.0", STRONG)[1]
        text, alerts = self.draw(state="listening", address="0.0.0.0:9833", token_source="preferences",
                                 warning=warning)
        self.assertIn("from preferences", text)
        self.assertIn("WARNING", " ".join(a[1] for a in alerts))

    def test_a_refusal_shows_why(self):
        message = bind_decision("0.0.0.0", "short")[1]
        text, alerts = self.draw(state="refused", message=message)
        self.assertNotIn("Listening", text)
        self.assertIn("at least 16 characters", " ".join(a[1] for a in alerts))
        self.assertTrue(all(len(a[1]) <= 100 for a in alerts), "wrapped to fit a label")


def blender_ext_script():
    """Blender's extension tool (what `blender --command extension` runs), where this Blender has it."""
    path = os.path.join(bpy.utils.system_resource("SCRIPTS"), "addons_core", "bl_pkg", "cli", "blender_ext.py")
    return path if os.path.isfile(path) else None


class ValidatorTest(unittest.TestCase):
    def test_blenders_own_validator_accepts_the_zip(self):
        script = blender_ext_script()
        if script is None:
            self.skipTest("this Blender (%s) has no extension validator (4.2+)" % bpy.app.version_string)
        python = sys.executable if not bpy.app.binary_path else None
        if python is None:
            self.skipTest("blender_ext.py needs a Python to run it; this is a Blender binary")
        for target in (ZIP, SOURCE):
            done = subprocess.run([python, script, "validate", target], capture_output=True, text=True, timeout=120)
            self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
            self.assertIn("Success", done.stdout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InstallTest(unittest.TestCase):
    """One throwaway Blender installs the zip; each test reads one part of what it saw."""

    @classmethod
    def setUpClass(cls):
        cls.home = tempfile.TemporaryDirectory(prefix="vibe-ext-home-")
        home = cls.home.name
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIBE_", "BLENDER_USER_"))}
        env.update(HOME=home, TMPDIR=home, BLENDER_USER_RESOURCES=os.path.join(home, "resources"),
                   BLENDER_USER_CONFIG=os.path.join(home, "config"),
                   BLENDER_USER_SCRIPTS=os.path.join(home, "scripts"),
                   BLENDER_USER_EXTENSIONS=os.path.join(home, "extensions"),
                   BLENDER_USER_DATAFILES=os.path.join(home, "datafiles"))
        cls.port, cls.token = free_port(), "probe-token-%d" % os.getpid()
        env.update(VIBE_PORT=str(cls.port), VIBE_TOKEN=cls.token)
        probe = os.path.join(HERE, "extension_probe.py")
        args = [ZIP, str(cls.port), cls.token]
        if bpy.app.binary_path:
            command = [bpy.app.binary_path, "-b", "--factory-startup", "--python-exit-code", "1",
                       "--python", probe, "--"] + args
        else:
            command = [sys.executable, probe] + args
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        cls.output = done.stdout + done.stderr
        found = re.search(r"^PROBE (.*)$", done.stdout, re.MULTILINE)
        cls.report = json.loads(found.group(1)) if found and done.returncode == 0 else None

    @classmethod
    def tearDownClass(cls):
        cls.home.cleanup()

    def setUp(self):
        self.assertIsNotNone(self.report, "the probe failed:\n" + self.output[-4000:])

    def test_installed_the_right_way_into_the_throwaway_folder(self):
        self.assertEqual(self.report["blender"], list(bpy.app.version))
        self.assertEqual(self.report["how"], "extension" if bpy.app.version >= (4, 2, 0) else "legacy add-on")
        self.assertEqual(self.report["install"], ["FINISHED"])
        self.assertTrue(self.report["enabled"])
        self.assertTrue(os.path.realpath(self.report["installed_in"]).startswith(os.path.realpath(self.home.name)),
                        self.report["installed_in"])

    def test_it_listens_and_a_client_logs_in_with_the_token(self):
        self.assertEqual(self.report["status"]["state"], "listening")
        self.assertEqual(self.report["status"]["address"], "127.0.0.1:%d" % self.port)
        self.assertEqual(self.report["status"]["token_source"], "VIBE_TOKEN")
        good = self.report["good_token"]
        self.assertEqual((good["hello"], good["auth"]), ("hello", {"type": "auth_ok"}))
        self.assertTrue(good["configure"])
        self.assertTrue(good["call"]["ok"], good["call"])
        self.assertEqual(good["call"]["result"]["name"], "Cube")

    def test_a_wrong_token_is_refused(self):
        auth = self.report["wrong_token"]["auth"]
        self.assertEqual(auth["type"], "error")
        self.assertIn("authentication failed", auth["error"]["message"])
        self.assertNotIn("call", self.report["wrong_token"])

    def test_the_preferences_refuse_a_remote_bind_with_a_short_token(self):
        refused = self.report["refused"]
        self.assertEqual(refused["state"], "refused")
        self.assertIn("at least 16 characters", refused["message"])
        self.assertFalse(self.report["refused_listening"])
        self.assertEqual(self.report["prefs_kept"], [self.port, "0.0.0.0", True])

    def test_the_preferences_port_and_token_serve_without_environment(self):
        prefs = self.report["prefs"]
        self.assertEqual(prefs["state"], "listening")
        self.assertEqual(prefs["sources"], {"port": "preferences", "bind": "preferences", "token": "preferences"})
        self.assertEqual(self.report["prefs_token"]["auth"], {"type": "auth_ok"})
        self.assertTrue(self.report["prefs_token"]["call"]["ok"])

    def test_disabling_stops_the_listener(self):
        self.assertFalse(self.report["after_disable_listening"])

    def test_the_token_is_never_printed(self):
        self.assertNotIn(self.token, self.output)


if __name__ == "__main__":
    unittest.main()
