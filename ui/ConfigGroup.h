// ConfigGroup: one group of the settings panel (ConfigPanel). It writes its fields into a
// RunConfig, shows a RunConfig's values in them, says when the user edited one (edited), and
// shows each of its fields' problems: a field ("tile", "overlap"...) has an editor, framed red
// while invalid, and an error label under it named "<field>Error".
//
// Also here: the editors the groups share, made alike (spin boxes wide enough that validateAll,
// not the box clamping silently, says what is wrong; combo boxes whose items carry the
// configuration's names for an enum).
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include <QComboBox>
#include <QGroupBox>
#include <QString>

#include "core/run/RunConfig.h"

class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace tessera {

class ConfigGroup : public QGroupBox {
    Q_OBJECT
public:
    // Writes the group's fields into `config`; the rest of it is left as it is.
    virtual void readInto(RunConfig& config) const = 0;
    // Shows `config`'s values of the group's fields.
    virtual void showConfig(const RunConfig& config) = 0;

    // `field` is one of this group's ("tile"), with an error label of its own.
    bool hasField(const QString& field) const { return fields_.count(field) != 0; }
    // Shows each field's reason from `problems` (field -> reason) under it; clears the others.
    void markProblems(const std::map<QString, QString>& problems);

signals:
    // The user changed a value (also a value the group set in answer to another).
    void edited();

protected:
    explicit ConfigGroup(const QString& title, QWidget* parent = nullptr);
    // The hidden error label of `field`, shown by markProblems; `editor` is framed red with it.
    QLabel* addErrorLabel(const QString& field, QWidget* editor);

private:
    struct FieldView {
        QWidget* editor = nullptr;
        QLabel* error = nullptr;
    };
    std::map<QString, FieldView> fields_;
};

// Wide enough that every value a person might type stays in the box.
inline constexpr int kMaxSpin = 1 << 16;

QSpinBox* makeSpin(int lo, int hi, const QString& suffix = {});
QDoubleSpinBox* makeRealSpin(double lo, double hi, double step, int decimals);
// A hint, warning or error line (the panel's style sheet colours each role).
QLabel* makeRoleLabel(const char* objectName, const char* role);

template <typename Enum>
QString enumName(Enum value) {
    const std::string_view name = toString(value);
    return QString::fromUtf8(name.data(), static_cast<qsizetype>(name.size()));
}

// A combo box of (value, text) items; each item's data is the value's configuration name.
template <typename Enum>
QComboBox* makeCombo(std::initializer_list<std::pair<Enum, QString>> items) {
    auto* combo = new QComboBox;
    for (const auto& [value, text] : items) combo->addItem(text, enumName(value));
    return combo;
}

template <typename Enum>
void selectIn(QComboBox* combo, Enum value) {
    const int index = combo->findData(enumName(value));
    if (index >= 0) combo->setCurrentIndex(index);
}

inline std::string selectedName(const QComboBox* combo) { return combo->currentData().toString().toStdString(); }

}  // namespace tessera
