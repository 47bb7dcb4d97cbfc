"""Settings: one table, three sources, flags win; bad values are refused with their source."""

import configparser
import pathlib

import pytest

from plant_store.config import SETTINGS, Config, ConfigError, load

EXAMPLE = pathlib.Path(__file__).parent.parent / "conf" / "plant-store.ini"


def test_defaults():
    config = Config()
    assert (config.host, config.port, config.store, config.max_body_size) == (
        "127.0.0.1", 8080, "jsonfile", 65536)
    assert config.token_file.endswith("tokens.json")


def test_precedence_file_then_environment_then_flags(tmp_path):
    ini = tmp_path / "a.ini"
    ini.write_text("[plant-store]\nport = 1000\nthreads = 3\nstore = memory\nlog_level = debug\n")
    env = {"PLANT_STORE_PORT": "2000", "PLANT_STORE_THREADS": "5"}
    config = load(str(ini), env, {"port": "3000"})
    assert (config.port, config.threads, config.store, config.log_level) == (
        3000, 5, "memory", "debug")


def test_example_file_lists_every_setting_with_its_default():
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(EXAMPLE)
    assert dict(parser.items("plant-store")) == {s.name: s.default for s in SETTINGS}
    assert vars(load(str(EXAMPLE))) == vars(Config())


@pytest.mark.parametrize(("source", "message"), [
    ({"PLANT_STORE_STORE": "sqlite"}, "store='sqlite' (from environment PLANT_STORE_STORE)"),
    ({"PLANT_STORE_PORT": "70000"}, "port='70000'"),
    ({"PLANT_STORE_PORT": "eighty"}, "port='eighty'"),
    ({"PLANT_STORE_THREADS": "0"}, "threads='0'"),
    ({"PLANT_STORE_FSYNC": "maybe"}, "fsync='maybe'"),
])
def test_bad_values_name_the_setting_and_source(source, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(None, source)


def test_unknown_setting_in_file_is_refused(tmp_path):
    ini = tmp_path / "a.ini"
    ini.write_text("[plant-store]\nprot = 80\n")
    with pytest.raises(ConfigError, match="unknown setting 'prot'"):
        load(str(ini))


def test_missing_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load(str(tmp_path / "nope.ini"))
